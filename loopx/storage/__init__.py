"""Storage primitives: the only way bytes reach disk (atomic write, exclusive create, keyed JSON-Lines append, file and soft locks)."""
