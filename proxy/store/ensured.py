"""memproxy's own indices, each made sure of once per process: created from its template, or, when another
process (or an earlier start) made it, its mapping extended to the template's (a newer memproxy may map
more fields; an old, incompatible mapping is kept and logged, so a process keeps serving with it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from proxy.store.client import IndexExists, OpenSearchError, Store, url

__all__ = ["EnsuredIndices"]

log = logging.getLogger(__name__)


class EnsuredIndices:
    """The indices one owner (a document class of the store) has made sure of in this process."""

    def __init__(self, store: Store, body: Callable[[str], Mapping[str, Any]]) -> None:
        self.store = store
        self._body = body
        self._done: set[str] = set()
        self._lock = asyncio.Lock()

    async def ensure(self, index: str) -> None:
        if index in self._done:
            return
        async with self._lock:
            if index in self._done:
                return
            body = self._body(index)
            try:
                await self.store.request("PUT", url(index), body=body)
            except IndexExists:
                try:
                    await self.store.request("PUT", url(index, "_mapping"), body=body["mappings"])
                except OpenSearchError as exc:
                    log.warning("could not extend the mapping of %s: %s", index, exc.message)
            self._done.add(index)
