"""The Status / Attention layer: the pure projection, its cheap sources, change hints, the incremental cache, metrics, probes and the HTTP server."""
