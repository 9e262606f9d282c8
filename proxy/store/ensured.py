"""memproxy's own indices, each made sure of once per process: created from its template, or, when another
process (or an earlier start) made it, its mapping extended to the template's (a newer memproxy may map
more fields; an old, incompatible mapping is kept and logged, so a process keeps serving with it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from proxy.store.client import IndexExists, OpenSearchError, Store, url

__all__ = ["EnsuredIndices"]

log = logging.getLogger(__name__)


@dataclass
class _Done:
    """What one store has made sure of in this process, whichever owner asked."""

    indices: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


# Per store, not per owner: start-up makes every private index sure once (proxy.store.private), and owners
# built afresh per call (a GoodMemIndices in a request) then cost no further PUT.
_DONE: WeakKeyDictionary[Store, _Done] = WeakKeyDictionary()


class EnsuredIndices:
    """How one owner (a document class of the store) makes its indices sure of: ``body`` gives an index's
    template body."""

    def __init__(self, store: Store, body: Callable[[str], Mapping[str, Any]]) -> None:
        self.store = store
        self._body = body

    async def ensure(self, index: str) -> None:
        done = _DONE.setdefault(self.store, _Done())
        if index in done.indices:
            return
        async with done.lock:
            if index in done.indices:
                return
            body = self._body(index)
            try:
                await self.store.request("PUT", url(index), body=body)
            except IndexExists:
                try:
                    await self.store.request("PUT", url(index, "_mapping"), body=body["mappings"])
                except OpenSearchError as exc:
                    log.warning("could not extend the mapping of %s: %s", index, exc.message)
            done.indices.add(index)
