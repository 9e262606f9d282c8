"""Per-caller concurrency: at most ``limit`` operations of one caller in flight at once.

One caller's burst of expensive requests (retrieves that each fan out into embeddings and searches) must
not occupy the node and the event loop that every other caller shares. A caller over its limit waits up to
``wait_s`` for one of its own operations to end, then gets :class:`~proxy.errors.Overloaded` (429, in the
shape of the API it called). Other callers are never made to wait by it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from proxy.errors import Overloaded

__all__ = ["CallerSlots"]


class CallerSlots:
    """``async with slots.hold(caller):`` around one operation of ``caller``; see the module docstring."""

    def __init__(self, what: str, limit: int, wait_s: float = 1.0) -> None:
        self.what = what
        self.limit = limit
        self.wait_s = wait_s
        # caller → (semaphore, holders and waiters): an entry exists only while one of them does.
        self._slots: dict[str, tuple[asyncio.Semaphore, int]] = {}

    def in_flight(self, caller: str) -> int:
        entry = self._slots.get(caller)
        return 0 if entry is None else min(entry[1], self.limit)

    @contextlib.asynccontextmanager
    async def hold(self, caller: str) -> AsyncIterator[None]:
        semaphore, users = self._slots.get(caller) or (asyncio.Semaphore(self.limit), 0)
        self._slots[caller] = (semaphore, users + 1)
        try:
            try:
                await asyncio.wait_for(semaphore.acquire(), self.wait_s)
            except TimeoutError:
                raise Overloaded(
                    f"Too many {self.what} of this caller at once: at most {self.limit} run together "
                    f"and none ended within {self.wait_s:g} s; retry later"
                ) from None
            try:
                yield
            finally:
                semaphore.release()
        finally:
            semaphore, users = self._slots[caller]
            if users <= 1:
                del self._slots[caller]
            else:
                self._slots[caller] = (semaphore, users - 1)
