"""Everything that talks to OpenSearch."""

from proxy.store.client import OpenSearchError, Store

__all__ = ["OpenSearchError", "Store"]
