"""Several nodes: which failed call may go again to another node, and the pass-through's turn of nodes.

memproxy may be given every node of a cluster (``--opensearch-url`` with several URLs). A node that is down
answers nothing: the connection is refused, or one open to it drops mid-call. A refused connection sent
nothing, so any call may go to the next node. A dropped one may have been carried out already: it goes
again only when doing it twice leaves what doing it once does (:func:`may_resend`), which memproxy's writes
mostly are, since they name the ids they write. A timeout is never sent again: the node may still be
working on it, and a second wait would double the caller's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import aiohttp

__all__ = [
    "DEAD_S",
    "MAX_DEAD_S",
    "TRANSIENT_TYPES",
    "HostRing",
    "cancelled_at_deadline",
    "may_resend",
    "never_sent",
    "transient",
]

# A node that failed is skipped for DEAD_S seconds, doubling on each failure in a row up to MAX_DEAD_S: a
# node restarted after a crash takes its share of calls again within seconds.
T = TypeVar("T")

DEAD_S = 2.0
MAX_DEAD_S = 30.0

# POSTs that only read (a search, a count, a multi-get, a refresh): sending one twice reads twice.
_READING_POSTS = frozenset({"_search", "_count", "_mget", "_msearch", "_refresh", "_field_caps", "_explain"})


def never_sent(cause: BaseException | None) -> bool:
    """True when the connection failed before any byte of the request left (refused, unreachable, TLS
    handshake): the node cannot have acted on it."""
    return isinstance(cause, aiohttp.ClientConnectorError)


def _conditional(params: Mapping[str, Any] | None) -> bool:
    """A write that must fail when repeated: ``op_type=create`` (409 the second time) or a version check."""
    p = params or {}
    return p.get("op_type") == "create" or "if_seq_no" in p or "if_primary_term" in p


def _bulk_repeatable(body: Any) -> bool:
    """Every action of a ``_bulk`` body is an ``index`` of a named id without a version check: the second
    run writes the same documents again. ``create`` (409 twice) and ``delete`` (404 twice) are not."""
    if not isinstance(body, str):
        return False
    lines = iter(line for line in body.split("\n") if line.strip())
    for line in lines:
        try:
            action = json.loads(line)
        except ValueError:
            return False
        if not isinstance(action, dict) or set(action) != {"index"} or not isinstance(action["index"], dict):
            return False
        meta = action["index"]
        if "_id" not in meta or _conditional(meta):
            return False
        next(lines, None)  # the document
    return True


def may_resend(method: str, endpoint: str, path: str, params: Mapping[str, Any] | None, body: Any) -> bool:
    """May this call, which may have reached a node that then went away, be sent to another node? Only
    when running it twice is the same as running it once: reads, and writes of a named id without a
    version check. ``endpoint`` is the path's API (``proxy.store.client.endpoint_of``)."""
    if method in ("GET", "HEAD"):
        return True
    if _conditional(params) or "point_in_time" in path or "scroll" in path:
        return False
    if method == "POST" and endpoint in _READING_POSTS:
        return True
    if method == "PUT" and endpoint == "_doc":  # PUT <index>/_doc/<id>: the same document again
        return True
    if method == "POST" and endpoint == "_update":  # set fields: again sets the same values
        return isinstance(body, dict) and "script" not in body
    if method == "POST" and endpoint == "_bulk":
        return _bulk_repeatable(body)
    return False


# Errors a node reports, with a 500 or as the cause of another error, when a node it needs has just gone
# (or a cluster manager is not elected yet): the call may succeed when retried, once the cluster has
# moved on. memproxy answers them 503 with Retry-After.
TRANSIENT_TYPES = frozenset(
    {
        "node_disconnected_exception",
        "node_not_connected_exception",
        "node_closed_exception",
        "connect_transport_exception",
        "send_request_transport_exception",
        "receive_timeout_transport_exception",
        "no_node_available_exception",
        "unavailable_shards_exception",
        "no_shard_available_action_exception",
        "shard_not_found_exception",
        "primary_missing_action_exception",
        "cluster_manager_not_discovered_exception",
        "master_not_discovered_exception",
        "not_cluster_manager_exception",
        "not_master_exception",
        "failed_to_commit_cluster_state_exception",
        "process_cluster_event_timeout_exception",
        "cluster_block_exception",
    }
)


def _errors(body: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    """An error object and every cause it names (``root_cause``, ``caused_by``, a search's
    ``failed_shards[].reason``)."""
    if not isinstance(body, dict) or depth > 8:
        return
    yield body
    for cause in body.get("root_cause") or ():
        yield from _errors(cause, depth + 1)
    yield from _errors(body.get("caused_by"), depth + 1)
    for failure in body.get("failed_shards") or ():
        if isinstance(failure, dict):
            yield from _errors(failure.get("reason"), depth + 1)


def transient(body: Any) -> bool:
    """The node's error, or one of its causes, is one a retry may not meet once the cluster moved on."""
    return any(error.get("type") in TRANSIENT_TYPES for error in _errors(body))


def cancelled_at_deadline(body: Any) -> bool:
    """The node cancelled the search at its ``cancel_after_time_interval`` (memproxy's
    ``--search-timeout-s``): "cancelled task with reason: Cancellation timeout of 30000ms is expired"."""
    return any(
        error.get("type") == "task_cancelled_exception" and "Cancellation timeout" in str(error.get("reason"))
        for error in _errors(body)
    )


class HostRing:
    """The nodes in turn (round robin), a node that failed skipped until its time out ends (all of them
    failed: the one back soonest first). The pass-through session and the security plugin's ``authinfo``
    call use it; opensearch-py's connection pool does the same for every other call."""

    def __init__(self, hosts: Sequence[str], clock: Callable[[], float] = time.monotonic):
        self.hosts = tuple(hosts)
        self._clock = clock
        self._next = 0
        self._dead_until: dict[str, float] = {}
        self._failures: dict[str, int] = {}

    def order(self) -> list[str]:
        """Every host, in the order to try them for one call."""
        now = self._clock()
        start = self._next % len(self.hosts)
        self._next += 1
        turn = self.hosts[start:] + self.hosts[:start]
        live = [h for h in turn if self._dead_until.get(h, 0.0) <= now]
        dead = sorted((h for h in turn if h not in live), key=lambda h: self._dead_until[h])
        return live + dead

    def failed(self, host: str) -> None:
        count = self._failures.get(host, 0) + 1
        self._failures[host] = count
        self._dead_until[host] = self._clock() + min(MAX_DEAD_S, DEAD_S * 2 ** (count - 1))

    def answered(self, host: str) -> None:
        if host in self._failures:
            del self._failures[host]
            self._dead_until.pop(host, None)

    async def first_answer(
        self,
        call: Callable[[str], Awaitable[T]],
        *,
        move_on: tuple[type[BaseException], ...],
        give_up: tuple[type[BaseException], ...],
        set_aside_on_give_up: bool,
        unreachable: Callable[[str], Exception],
    ) -> T:
        """``call(host)`` on the hosts in turn until one answers. A failure of a ``move_on`` kind (what can
        be sent again: the connection was refused, or the call is a read) sets the host aside and tries the
        next; a ``give_up`` kind ends the call, setting the host aside when told to. When no host is left,
        ``unreachable(message)`` is raised (a 503 with ``Retry-After``)."""
        hosts = self.order()
        for attempt, host in enumerate(hosts):
            try:
                answer = await call(host)
            except move_on as exc:
                self.failed(host)
                if attempt + 1 < len(hosts):
                    continue
                raise unreachable(f"OpenSearch at {host} is unreachable: {exc}") from exc
            except give_up as exc:
                if set_aside_on_give_up:
                    self.failed(host)
                raise unreachable(f"OpenSearch at {host} is unreachable: {exc}") from exc
            self.answered(host)
            return answer
        raise AssertionError("unreachable: the last host returns or raises")
