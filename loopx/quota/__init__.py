"""The Compute Quota layer.

``policy`` (a goal's budget and the window), ``usage`` (one turn's), ``window``
(minute buckets), ``ledger`` (``quota.jsonl`` and the one window reader),
``budget`` (the one window algorithm), ``headroom`` (the host) and
``decision`` (``should_run``).
"""
