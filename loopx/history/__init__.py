"""Reading the Run History: every read of ``history.jsonl`` (tails, counters, the whole file).

The records themselves are the turn's: :mod:`loopx.turn.historyline` (one
compact line per finished turn) and :mod:`loopx.turn.runlog` (one full report
per turn), written by :mod:`loopx.turn.writeback`.
"""
