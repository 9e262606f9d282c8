"""Working memory, sessions and history, and the by-type operations (get / update / delete / search /
delete-by-query) ml-commons offers on every memory type, long-term included.

Behaviour follows ml-commons 3.8: sessions on by default, a client-chosen session id is upserted,
``last_updated_time`` moves only when content changes (not when a memory is pinned), ``pinned`` needs
retention enabled (proxy.core.retention) and is refused on working memory.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.infer import InferRequest
from proxy.core.infer.summary import session_summary
from proxy.core.longterm import embed_texts
from proxy.core.longterm_mirror import ids_matching, mirror_deleted, sync_mirror
from proxy.core.search import check_caller_dsl
from proxy.core.services import Services
from proxy.core.sessions import find_session
from proxy.errors import BadRequest, Conflict, Forbidden, MemproxyError, NotFound
from proxy.store import memories as docs
from proxy.store import search as searches
from proxy.store.client import IndexMissing
from proxy.store.query import Filter
from proxy.store.query_dsl import neural_clauses

__all__ = [
    "UPDATABLE_FIELDS",
    "AddMemoryRequest",
    "CreateSessionRequest",
    "MemoryUpdate",
    "add_memory",
    "create_session",
    "delete_by_query",
    "delete_memory",
    "get_memory",
    "search_memories",
    "update_memory",
]

log = logging.getLogger(__name__)

PINNED_WORKING = (
    "pinned field is not supported for working memory type. To preserve a conversation, pin the session "
    "instead."
)
PINNED_DISABLED = (
    "Cannot set pinned: the memory retention feature is not enabled. To enable it, please update the cluster "
    "setting plugins.ml_commons.memory.retention_enabled"
)
_UPDATABLE = {
    "sessions": ("summary", "metadata", "agents", "additional_info"),
    "working": ("messages", "binary_data", "structured_data", "structured_data_blob", "metadata", "tags"),
    "long-term": ("memory", "tags"),
}
UPDATABLE_FIELDS = frozenset(key for keys in _UPDATABLE.values() for key in keys)
_CONTENT_KEYS = {
    "sessions": ("summary",),
    "working": ("messages", "binary_data", "structured_data", "structured_data_blob"),
    "long-term": ("memory",),
}


def _index_or_404(container: Container, memory_type: str) -> str:
    index = container.index_name(memory_type)
    if index is None:
        raise NotFound("Memory index not found")
    return index


# --- add memory (working) and sessions -------------------------------------------------------------


@dataclass
class AddMemoryRequest:
    """An add-memory body after parsing (maps already coerced to strings as ml-commons does)."""

    messages: list[dict[str, Any]] | None = None
    payload_type: str = "conversational"
    structured_data: dict[str, Any] | None = None
    structured_data_blob: dict[str, Any] | None = None
    binary_data: str | None = None
    message_id: int | None = None
    checkpoint_id: str | None = None
    namespace: dict[str, str] | None = None
    metadata: dict[str, str] | None = None
    tags: dict[str, str] | None = None
    infer: bool = False
    parameters: dict[str, Any] | None = None
    # The caller's name, as ml-commons records it with the security plugin; None without authentication.
    owner_id: str | None = None


def _working_doc(
    container: Container, req: AddMemoryRequest, namespace: dict[str, str] | None
) -> dict[str, Any]:
    now = now_ms()
    doc: dict[str, Any] = {}
    if namespace and namespace.get("session_id"):
        doc["session_id"] = namespace["session_id"]
    if req.owner_id is not None:
        doc["owner_id"] = req.owner_id
    doc["memory_container_id"] = container.id
    doc["payload_type"] = req.payload_type
    optional = (
        ("messages", req.messages),
        ("message_id", req.message_id),
        ("checkpoint_id", req.checkpoint_id),
        ("binary_data", req.binary_data),
        ("structured_data", req.structured_data),
        ("structured_data_blob", req.structured_data_blob),
    )
    doc.update({k: v for k, v in optional if v is not None})
    if namespace is not None:
        doc["namespace"] = namespace
        doc["namespace_size"] = len(namespace)
    doc.update({k: v for k, v in (("metadata", req.metadata), ("tags", req.tags)) if v is not None})
    if req.parameters:
        doc["parameters"] = req.parameters
    doc["infer"] = req.infer
    doc["created_time"] = now
    doc["last_updated_time"] = now
    return doc


@dataclass(frozen=True)
class AddedMemory:
    """What an add wrote: ml-commons' answer, and the extraction to run when ``infer`` was asked."""

    response: dict[str, Any]
    infer: InferRequest | None = None


async def add_memory(svc: Services, container: Container, req: AddMemoryRequest) -> AddedMemory:
    """Write one working-memory document; ``{"session_id"?, "working_memory_id"}`` and, with ``infer``,
    the extraction for the caller to enqueue (a durable job that runs after the answer, as in ml-commons)."""
    if req.infer and not req.messages:
        raise BadRequest("No messages provided when inferring memory")
    if req.infer and not container.configuration.get("llm_id"):
        raise BadRequest("infer=true requires llm_model_id to be configured in memory storage")
    index = _index_or_404(container, "working")
    namespace = dict(req.namespace) if req.namespace is not None else None
    sessions_index = container.index_name("sessions")
    session_id = (namespace or {}).get("session_id")
    if sessions_index is not None and not session_id and req.payload_type == "conversational":
        if container.configuration.get("llm_id"):
            # ml-commons asks the LLM for a summary of the messages first; so does memproxy.
            summary = await session_summary(svc, container, req.messages or [])
            session_id = await _new_session(
                svc, container, sessions_index, namespace or {}, req.owner_id, summary
            )
            namespace = {**(namespace or {}), "session_id": session_id}
    elif sessions_index is not None and session_id:
        await _upsert_session(svc, container, sessions_index, session_id, namespace or {}, req.owner_id)
    result = await docs.index_doc(svc.store, index, _working_doc(container, req, namespace), refresh=True)
    response: dict[str, Any] = {}
    if namespace and namespace.get("session_id"):
        response["session_id"] = namespace["session_id"]
    response["working_memory_id"] = result["_id"]
    infer = None
    if req.infer:
        infer = InferRequest(
            key=str(result["_id"]),
            container_id=container.id,
            messages=list(req.messages or []),
            namespace=dict(namespace or {}),
            tags=dict(req.tags or {}),
            owner_id=req.owner_id,
        )
    return AddedMemory(response, infer)


def _owned(owner_id: str | None) -> dict[str, Any]:
    return {"owner_id": owner_id} if owner_id is not None else {}


async def _new_session(
    svc: Services,
    container: Container,
    index: str,
    namespace: Mapping[str, str],
    owner_id: str | None,
    summary: str | None,
) -> str:
    now = now_ms()
    doc = {
        **_owned(owner_id),
        "memory_container_id": container.id,
        **({"summary": summary} if summary is not None else {}),
        "namespace": dict(namespace),
        "created_time": now,
        "last_updated_time": now,
    }
    result = await docs.index_doc(svc.store, index, doc, refresh=True)
    return str(result["_id"])


async def _upsert_session(
    svc: Services,
    container: Container,
    index: str,
    session_id: str,
    namespace: Mapping[str, str],
    owner_id: str | None,
) -> None:
    """3.8: a client-chosen session gets a minimal document if it has none, and its time moves on."""
    doc_id, _ = await find_session(svc, container, index, session_id)
    now = now_ms()
    minimal = {
        **_owned(owner_id),
        "memory_container_id": container.id,
        "namespace": dict(namespace),
        "created_time": now,
        "last_updated_time": now,
    }
    await docs.update_doc(svc.store, index, doc_id, {"last_updated_time": now}, upsert=minimal, refresh=True)


@dataclass
class CreateSessionRequest:
    session_id: str | None = None
    summary: str | None = None
    metadata: dict[str, Any] | None = None
    agents: dict[str, Any] | None = None
    additional_info: dict[str, Any] | None = None
    namespace: dict[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    owner_id: str | None = None


async def create_session(svc: Services, container: Container, req: CreateSessionRequest) -> dict[str, Any]:
    """``{"session_id", "status": "created"|"exists"}``; an existing session is left untouched (3.6+)."""
    index = container.index_name("sessions")
    if index is None:
        raise BadRequest("Session is disabled for this container", os_type="status_exception")
    now = now_ms()
    doc: dict[str, Any] = {**_owned(req.owner_id), "memory_container_id": container.id}
    if req.summary is not None:
        doc["summary"] = req.summary
    doc["created_time"] = now
    doc["last_updated_time"] = now
    for key in ("metadata", "agents", "additional_info", "namespace"):
        if getattr(req, key) is not None:
            doc[key] = getattr(req, key)
    session_id = req.session_id if req.session_id and req.session_id.strip() else None
    if session_id is None:
        result = await docs.index_doc(svc.store, index, doc, create=True, refresh=True)
        return {"session_id": result["_id"], "status": "created"}
    doc_id, found = await find_session(svc, container, index, session_id)
    if found is None:
        try:
            await docs.index_doc(svc.store, index, doc, doc_id=doc_id, create=True, refresh=True)
        except Conflict:
            found = {}  # created by a concurrent request of this container since the lookup
    return {"session_id": session_id, "status": "created" if found is None else "exists"}


# --- get / update / delete by type -----------------------------------------------------------------


async def _load(
    svc: Services, container: Container, memory_type: str, memory_id: str
) -> tuple[str, dict[str, Any]]:
    """The index and the node's GET answer (its ``_id`` the stored id) of one memory of this container."""
    index = _index_or_404(container, memory_type)
    if memory_type == "sessions":
        _, found = await find_session(svc, container, index, memory_id)
    else:
        try:
            found = await docs.get_doc(svc.store, index, memory_id, routing=container.id)
        except IndexMissing:
            found = None
    # Indices are shared by every container with the same prefix: another container's memory is not found.
    if found is None or found["_source"].get("memory_container_id") != container.id:
        raise NotFound("Memory not found")
    return index, found


async def get_memory(svc: Services, container: Container, memory_type: str, memory_id: str) -> dict[str, Any]:
    """The stored document of one memory of this container (404 when it has none by that id)."""
    _, found = await _load(svc, container, memory_type, memory_id)
    source: dict[str, Any] = found["_source"]
    return source


@dataclass(frozen=True)
class MemoryUpdate:
    """An update request: the fields it sets, values as sent (a field sent as ``null`` is set to ``null``, as
    ml-commons re-indexes what it is given), and ``pinned`` when it pins (true) or unpins (false) it."""

    fields: Mapping[str, Any]
    pinned: bool | None = None


async def update_memory(
    svc: Services, container: Container, memory_type: str, memory_id: str, update: MemoryUpdate
) -> dict[str, Any]:
    """Patch the fields the type lets an update change and re-index the whole document; the node's index
    result.

    A long-term ``memory`` is embedded again, as ml-commons' ingest pipeline would.
    """
    if memory_type == "history":
        _index_or_404(container, memory_type)  # a disabled history is "not found" before it is read-only
        raise NotFound("Can't update memory history")
    if update.pinned is not None:
        if memory_type == "working":
            raise BadRequest(PINNED_WORKING, os_type="status_exception")
        if not (await svc.retention.current()).enabled:
            raise Forbidden(PINNED_DISABLED)
    index, found = await _load(svc, container, memory_type, memory_id)
    doc = dict(found["_source"])
    if update.pinned is not None:
        doc["pinned"] = update.pinned  # not content: last_updated_time stays
    applied = {k: update.fields[k] for k in _UPDATABLE[memory_type] if k in update.fields}
    if memory_type == "long-term" and "memory" in applied:
        text = applied["memory"]
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("Text cannot be null or empty")
        vectors = await embed_texts(svc, container, [text])
        doc.update({name: vecs[0] for name, vecs in vectors.items()})
    doc.update(applied)
    if any(k in applied for k in _CONTENT_KEYS[memory_type]):
        doc["last_updated_time"] = now_ms()
    result = await docs.index_doc(
        svc.store,
        index,
        doc,
        doc_id=str(found["_id"]),
        refresh=True,
        if_seq_no=found.get("_seq_no"),
        if_primary_term=found.get("_primary_term"),
    )
    if memory_type == "long-term":
        await sync_mirror(svc, container, [str(found["_id"])], refresh=True)
    return result


async def delete_memory(
    svc: Services, container: Container, memory_type: str, memory_id: str
) -> dict[str, Any]:
    index, found = await _load(svc, container, memory_type, memory_id)
    result = await docs.delete_doc(svc.store, index, str(found["_id"]), refresh=False, routing=container.id)
    if memory_type == "long-term":
        await mirror_deleted(svc, container, [str(found["_id"])])
    return result


# --- search and delete by query --------------------------------------------------------------------


async def _neural_vectors(svc: Services, container: Container, query: Any) -> list[list[float]]:
    """One vector per ``neural`` clause of a caller's query (which needs the neural-search plugin on a node):
    its ``query_text`` embedded by its ``model_id``, or by the container's embedder."""
    vectors: list[list[float]] = []
    for clause in neural_clauses(query):
        model = clause.model_id or container.embedder_id
        if model is None:
            raise BadRequest("model_id must be provided for neural query")
        try:
            vectors.append(await svc.embed_query(model, clause.query_text))
        except NotFound:
            raise BadRequest(f"Embedding model with ID {model} not found") from None
    return vectors


async def search_memories(
    svc: Services, container: Container, memory_type: str, body: Mapping[str, Any]
) -> dict[str, Any]:
    """The type's ``_search`` of the caller's Search DSL body, scoped to the container the way ml-commons
    scopes it, ``neural`` clauses embedded here; the node's response. The body is checked against
    the Query DSL allowlist first (scripts only with ``--allow-scripts``)."""
    index = container.index_name(memory_type)
    if index is None:
        raise MemproxyError(
            "Failed to build search request: index must not be null",
            os_type="exception",
            details={"caused_by": {"type": "null_pointer_exception", "reason": "index must not be null"}},
        )
    query = body.get("query")
    if query is not None and not isinstance(query, Mapping):
        raise BadRequest(
            "[query] query malformed, no start_object after query name", os_type="parsing_exception"
        )
    check_caller_dsl(svc, body)
    vectors = await _neural_vectors(svc, container, query)
    try:
        return await searches.ml_search(
            svc.store, index, body, container_id=container.id, neural_vectors=vectors
        )
    except IndexMissing:
        return searches.empty_search_response()


async def delete_by_query(
    svc: Services, container: Container, memory_type: str, selection: Filter
) -> dict[str, Any]:
    """The node's ``_delete_by_query`` result for ``selection`` within this container (refresh=true);
    the caller's query is checked against the Query DSL allowlist first."""
    index = container.index_name(memory_type)
    if index is None:
        raise BadRequest(
            f"Invalid memory type or memory type is disabled: {memory_type}", os_type="status_exception"
        )
    check_caller_dsl(svc, selection, where="query")
    mirrored = await ids_matching(svc, container, selection) if memory_type == "long-term" else []
    result = await docs.delete_by_query(svc.store, index, selection, container_id=container.id, refresh=True)
    await mirror_deleted(svc, container, mirrored, refresh=True)
    return result
