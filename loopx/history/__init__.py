"""The Run History layer: one compact line per committed turn, what the scheduler and status read."""
