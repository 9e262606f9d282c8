"""Where a session document lives in a container's (shared) sessions index.

The sessions index is shared by every container of a family, and a document id is global in it. A
caller-chosen session id is therefore stored under an id of its container (``<container id>:<session id>``;
``:`` never occurs in a container id), so the same id chosen in two containers makes two sessions, and
nothing one container does with an id can bump, modify or reveal another container's session. Node-generated
session ids (a session made without an id) and documents written before this rule are found under their own
id, and only when their ``memory_container_id`` is this container's.
"""

from __future__ import annotations

from typing import Any

from proxy.core.container_record import Container
from proxy.core.services import Services
from proxy.errors import BadRequest
from proxy.store import memories as docs
from proxy.store.client import IndexMissing

__all__ = ["find_session"]

_MAX_DOC_ID_BYTES = 512


async def find_session(
    svc: Services, container: Container, index: str, session_id: str
) -> tuple[str, dict[str, Any] | None]:
    """(document id, the node's GET answer) of this container's session ``session_id``, or (the id to create
    it under, ``None``) when the container has none by that id."""
    scoped = f"{container.id}:{session_id}"
    fits = len(scoped.encode()) <= _MAX_DOC_ID_BYTES
    for doc_id in (scoped, session_id) if fits else (session_id,):
        try:
            found = await docs.get_doc(svc.store, index, doc_id, routing=container.id)
        except IndexMissing:
            break
        if found is not None and found["_source"].get("memory_container_id") == container.id:
            return doc_id, found
    if not fits:
        limit = _MAX_DOC_ID_BYTES - len(container.id.encode()) - 1
        raise BadRequest(f"session_id is too long: at most {limit} bytes in this memory container")
    return scoped, None
