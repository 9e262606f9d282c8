"""memproxy: a memory layer for AI agents on OpenSearch.

Two APIs over one store: the ml-commons agentic-memory API (``/_plugins/_ml/memory_containers``) and the
GoodMem API (``/v1/...``). Every other request is forwarded to OpenSearch unchanged.
"""

__version__ = "0.1.0"
