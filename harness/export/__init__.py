"""Plans written out for other tools to run: Kubernetes LeaderWorkerSet manifests (``lws``)."""
