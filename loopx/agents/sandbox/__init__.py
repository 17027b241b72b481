"""A goal's sandbox, the agent's side: bubblewrap, the bridge inside it, the proxy outside.

* :mod:`loopx.agents.sandbox.bwrap`: the bubblewrap command line (what is visible);
* :mod:`loopx.agents.sandbox.bridge`: the sandbox's first process (network bridge, limits);
* :mod:`loopx.agents.sandbox.proxy`: the allow-listing, key-adding proxy outside;
* :mod:`loopx.agents.sandbox.sandboxturn`: one turn's sandbox, as the host and check runners use it.
"""
