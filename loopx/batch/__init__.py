"""Batch runs: plans (JSON/TOML, validated whole) and the report a batch ends with."""
