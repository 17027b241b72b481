"""Choosing the next goal: the pure select (priority, then weighted fair share) and the gathering of its inputs."""
