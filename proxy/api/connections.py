"""Connections that cannot be held open for nothing: read deadlines and a cap per client address.

aiohttp closes a connection that is idle *between* requests (``keepalive_timeout``), but has no deadline
for a request that has begun: a client that sends half a request head, or a body one byte a minute
("slowloris"), holds its connection, its parser buffer and, for a body, a handler task for as long as it
likes. :class:`ConnectionGuard` is what the server's protocol (``guards.QuietRequestHandler``) consults on
every event of a connection:

* **Head deadline.** From the moment a connection opens, or the first byte of its next request arrives, the
  whole request head (request line and headers) must arrive within ``header_timeout_s``.
* **Body pauses.** While the body of a request is being read, no pause between two reads may last longer
  than ``body_timeout_s``, unless memproxy itself stopped reading (flow control: the handler is busy).
* **Connections per address.** One client address may hold at most ``max_per_address`` connections; a
  connection beyond that is closed as soon as it opens, before a byte is read.

A connection that breaks a deadline is closed (there is nobody to answer: the client is not sending); the
handler of a request whose body stalled sees the connection reset, as if the client had gone away.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConnectionGuard", "ConnectionLimits"]

log = logging.getLogger(__name__)


@dataclass
class ConnectionLimits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_per_address: int = 256
    # Open connections by client address (one process serves one listening socket).
    open: dict[str, int] = field(default_factory=dict)

    @property
    def tick_s(self) -> float:
        """How often a connection's deadlines are checked: a deadline is enforced within this much."""
        return max(0.05, min(1.0, self.header_timeout_s / 4, self.body_timeout_s / 4))


class ConnectionGuard:
    """One connection's deadlines (see the module docstring). ``protocol`` is aiohttp's RequestHandler:
    its ``force_close()`` closes the connection, its ``_reading_paused`` says memproxy stopped reading."""

    def __init__(self, limits: ConnectionLimits, protocol: Any, transport: asyncio.BaseTransport) -> None:
        self.limits = limits
        self.protocol = protocol
        self.loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self.refused = limits.open.get(self.address, 0) >= limits.max_per_address
        self.closed = False
        now = self.loop.time()
        # When the head now being read began (None: between requests), and when bytes last arrived.
        self.head_since: float | None = now
        self.last_read = now
        self.payload: Any = None  # the body being read (aiohttp's StreamReader), if any
        self.timer: asyncio.TimerHandle | None = None
        if self.refused:
            log.warning(
                "refused a connection from %s: it holds %d already (max_connections_per_address)",
                self.address,
                limits.open.get(self.address, 0),
            )
            return
        limits.open[self.address] = limits.open.get(self.address, 0) + 1
        self._arm()

    def received(self, new_payload: Any | None, *, in_body: bool = False) -> None:
        """After aiohttp parsed a read: ``new_payload`` is the body of a request whose head it completed
        (aiohttp's StreamReader; an empty one when there is no body), None when no head was completed;
        ``in_body``: the bytes arrived while a body was being read (so they were that body's)."""
        now = self.loop.time()
        self.last_read = now
        if new_payload is not None:
            self.head_since = None
            self.payload = new_payload
        elif not in_body and not self.reading_body() and self.head_since is None:
            self.head_since = now  # the first bytes of the next request's head

    def lost(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        if not self.refused:
            left = self.limits.open.get(self.address, 1) - 1
            if left > 0:
                self.limits.open[self.address] = left
            else:
                self.limits.open.pop(self.address, None)

    def reading_body(self) -> bool:
        return self.payload is not None and not self.payload.is_eof()

    def _arm(self) -> None:
        self.timer = self.loop.call_later(self.limits.tick_s, self._check)

    def _check(self) -> None:
        if self.closed:
            return
        now = self.loop.time()
        if self.head_since is not None and now - self.head_since > self.limits.header_timeout_s:
            self._close(f"sent no complete request head within {self.limits.header_timeout_s:g} s")
            return
        paused = bool(getattr(self.protocol, "_reading_paused", False))
        if self.reading_body() and not paused and now - self.last_read > self.limits.body_timeout_s:
            self._close(f"paused its request body for more than {self.limits.body_timeout_s:g} s")
            return
        if paused:
            self.last_read = now  # memproxy is not reading: the client is not the one pausing
        self._arm()

    def _close(self, why: str) -> None:
        log.info("closed a connection from %s: it %s", self.address, why)
        self.protocol.force_close()
        self.lost()
