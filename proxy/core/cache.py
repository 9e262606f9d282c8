"""Short-lived read caches for the per-request look-ups of searches and of GoodMem authentication.

Every search and retrieve first reads the container document, and every GoodMem request its API key and the
key's user (plus, for a caller who does not own the space, a grant count). Each is a node round trip that
costs more than the whole rest of the proxy's own work, so these look-ups keep what they found for ``ttl_s``
seconds (``--cache-ttl-s``, default 2; 0 turns caching off).

Consistency: writes made through *this* process invalidate the entries they change before they return, so a
client never reads its own writes stale. Another proxy process (or a direct write to the indices) is seen
after at most ``ttl_s``: a revoked key or grant keeps working there for up to that long, and a search may use
a container's settings from up to that long ago. Container documents are cached for the search paths only:
writes (adding or deleting memories, updating or deleting containers) always read them fresh. Only
successful look-ups are cached, so a key or container that does not exist yet is found as soon as it does.

One more look-up is cached the same way: the size of a vector search's filtered set, counted to choose
between exact scoring and the graph walk (``proxy.core.search``). A stale size only changes *how* the next
searches score (exactly, or walking the graph), never which memories match, since every search runs its
filter fresh. So no write invalidates it: a set that grew past the threshold is scored exactly for up to
``ttl_s`` longer, and one that shrank walks the graph for up to that long.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Caches", "TtlCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """A bounded LRU map whose entries expire ``ttl_s`` after they were loaded.

    Concurrent misses for one key share a single load. ``invalidate``/``clear`` also disown loads already
    in flight, so a read that raced a write cannot put the pre-write value back.
    """

    def __init__(
        self, ttl_s: float, *, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._loading: dict[K, asyncio.Task[V]] = {}
        self._generation = 0
        # Look-ups answered from the cache, and those that had to load (or join a load in flight); read by
        # the metrics at scrape time. With caching off every look-up is a miss.
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: K, load: Callable[[], Coroutine[Any, Any, V]]) -> V:
        if self.ttl_s <= 0:
            self.misses += 1
            return await load()
        entry = self._entries.get(key)
        if entry is not None:
            if self._clock() < entry[0]:
                self.hits += 1
                self._entries.move_to_end(key)
                return entry[1]
            del self._entries[key]
        self.misses += 1
        task = self._loading.get(key)
        if task is None:
            # The load runs as its own task, so a caller that gives up (a client disconnect cancels its
            # handler) does not cancel the load that other callers are waiting for.
            task = asyncio.get_running_loop().create_task(load())
            self._loading[key] = task
            task.add_done_callback(functools.partial(self._loaded, key, self._generation))
        return await asyncio.shield(task)

    def _loaded(self, key: K, generation: int, task: asyncio.Task[V]) -> None:
        if self._loading.get(key) is task:
            del self._loading[key]
        if task.cancelled() or task.exception() is not None:
            return  # failures are not cached; exception() also marks it retrieved
        if generation == self._generation:
            self._entries[key] = (self._clock() + self.ttl_s, task.result())
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def invalidate(self, key: K) -> None:
        self._generation += 1
        self._entries.pop(key, None)
        self._loading.pop(key, None)

    def clear(self) -> None:
        self._generation += 1
        self._entries.clear()
        self._loading.clear()


@dataclass(frozen=True)
class Caches:
    """The read caches of one proxy process (one per app, held by ``Services``)."""

    containers: TtlCache[str, Any]
    principals: TtlCache[str, Any]
    grants: TtlCache[tuple[str, str, tuple[str, ...]], bool]
    # (index, container id, the scoped filter's repr, the count's limit) -> the count (module docstring).
    set_sizes: TtlCache[tuple[str, str, str, int], int]

    @classmethod
    def with_ttl(cls, ttl_s: float) -> Caches:
        return cls(
            containers=TtlCache(ttl_s),
            principals=TtlCache(ttl_s),
            grants=TtlCache(ttl_s),
            set_sizes=TtlCache(ttl_s),
        )

    def access_changed(self) -> None:
        """A user, API key or grant was written: forget every cached authentication and grant answer."""
        self.principals.clear()
        self.grants.clear()
