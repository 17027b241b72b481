"""The Registry layer: every goal's policy, goal management (add, update, status changes, gates) and archiving."""
