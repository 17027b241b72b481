"""The supervisor process: keeps N agents alive on one runtime root."""

# The repository root has a link `supervisor -> loopx/supervisor`; imported through it, this
# package would be a second copy under another name (and would shadow supervisord's).
if __name__ != "loopx.supervisor":
    raise ImportError(
        f"{__name__!r} is the repository's link to loopx/supervisor: import loopx.supervisor"
    )
