"""The agent worker loop and the host adapters."""

# The repository root has a link `agents -> loopx/agents`; imported through it, this
# package would be a second copy under another name (and would shadow other `agents`).
if __name__ != "loopx.agents":
    raise ImportError(f"{__name__!r} is the repository's link to loopx/agents: import loopx.agents")
