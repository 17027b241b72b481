"""The Run Log and Run History layers.

``runlog``: one full report per turn (``runs/<seq>.json`` and ``.md``);
``line``: one compact line per finished turn (``history.jsonl``);
``reader``: every read of ``history.jsonl`` (tails, counters, the whole file).
"""
