"""memproxy's own small state documents in ``memproxy-settings`` (private: the pass-through refuses
``memproxy-settings*``): the cluster settings memproxy serves for ml-commons (the memory retention settings),
and the retention job's per-container state. Each is one document, read and written whole under
``if_seq_no`` so that concurrent processes do not lose each other's writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.store.client import IndexMissing, Store
from proxy.store.ensured import EnsuredIndices
from proxy.store.memories import delete_doc, get_doc, index_doc
from proxy.store.templates import render_index_body

__all__ = ["SETTINGS_INDEX", "SettingsDocs", "StateDoc"]

SETTINGS_INDEX = "memproxy-settings"


@dataclass(frozen=True)
class StateDoc:
    """One stored document and the version it was read at (``seq_no`` None: there was none)."""

    source: dict[str, Any]
    seq_no: int | None = None
    primary_term: int | None = None


class SettingsDocs:
    def __init__(self, store: Store, index: str = SETTINGS_INDEX) -> None:
        self.store = store
        self.index = index
        self._indices = EnsuredIndices(store, lambda _: render_index_body("settings"))

    async def ensure(self) -> None:
        await self._indices.ensure(self.index)

    async def read(self, doc_id: str) -> StateDoc:
        """The document (an empty one, unversioned, when absent)."""
        try:
            found = await get_doc(self.store, self.index, doc_id)
        except IndexMissing:
            return StateDoc({})
        if found is None:
            return StateDoc({})
        return StateDoc(dict(found.get("_source") or {}), found.get("_seq_no"), found.get("_primary_term"))

    async def write(self, doc_id: str, source: Mapping[str, Any], read: StateDoc) -> None:
        """Replace the document read as ``read``: ``NodeConflict`` when another writer got there first."""
        await self.ensure()
        await index_doc(
            self.store,
            self.index,
            source,
            doc_id=doc_id,
            create=read.seq_no is None,
            refresh=True,
            if_seq_no=read.seq_no,
            if_primary_term=read.primary_term,
        )

    async def delete(self, doc_id: str) -> None:
        try:
            await delete_doc(self.store, self.index, doc_id, refresh=True)
        except IndexMissing:
            return
