"""The agent worker loop and the host adapters."""
