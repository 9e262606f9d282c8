"""ml-commons 3.8/3.9 memory retention: the cluster settings memproxy serves for it, a container's
``retention_policy``, the eviction plan (the dry run) and the job that carries it out. The rules are in
docs/opensearch-api.md ("Retention")."""
