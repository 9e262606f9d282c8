"""Concurrency GoodMem uses: several awaits at once (the first failure cancels the rest) and best-effort
background work that the application owns (and cancels when it stops)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any, TypeVar

__all__ = ["BackgroundTasks", "gather"]

log = logging.getLogger(__name__)

T = TypeVar("T")


async def gather(awaitables: Sequence[Awaitable[T]]) -> list[T]:
    """Run concurrently; the first error cancels the rest (TaskGroup), and is raised as itself."""
    if len(awaitables) == 1:
        # The common case (one space, one embedder): nothing to run beside it, so no task and no group,
        # which cost more than the rest of the planning's own work.
        return [await awaitables[0]]

    async def run(awaitable: Awaitable[T]) -> T:
        return await awaitable

    try:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(run(a)) for a in awaitables]
    except BaseExceptionGroup as group:
        first = group.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None
    return [t.result() for t in tasks]


class BackgroundTasks:
    """Best-effort work started off the request path; every task still running is cancelled at close."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, None], what: str) -> None:
        """Run ``work`` without waiting for it; a failure is logged (at debug level) and dropped."""

        async def run() -> None:
            try:
                await work
            except Exception as exc:  # best effort: nothing waits for it
                log.debug("%s failed: %s", what, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: work.close())  # cancelled before it started: never awaited

    async def close(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
