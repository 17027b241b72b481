"""Retention: how much of each goal's past the root keeps, compaction (``loopx gc``), disk limits."""
