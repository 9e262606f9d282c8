"""The model registry's documents (``memproxy-models``) and the credential master key
(``memproxy-models-config``); both private to memproxy (the pass-through refuses ``memproxy-models*``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.errors import Conflict
from proxy.store.client import IndexMissing, NodeConflict, OpenSearchError, Store, url
from proxy.store.ensured import EnsuredIndices
from proxy.store.memories import get_doc, index_doc, search
from proxy.store.templates import render_index_body

__all__ = ["MODELS", "MODELS_CONFIG", "ModelDocs"]

log = logging.getLogger(__name__)

MODELS = "memproxy-models"
MODELS_CONFIG = "memproxy-models-config"
_TEMPLATES = {MODELS: "models", MODELS_CONFIG: "models_config"}
_MASTER_KEY_ID = "master-key"


class ModelDocs:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._indices = EnsuredIndices(store, lambda index: render_index_body(_TEMPLATES[index]))

    async def ensure(self, index: str = MODELS) -> None:
        await self._indices.ensure(index)

    async def get(self, doc_id: str) -> dict[str, Any] | None:
        try:
            found = await get_doc(self.store, MODELS, doc_id)
        except IndexMissing:  # nothing registered yet
            return None
        return None if found is None else dict(found.get("_source") or {})

    async def put(self, doc_id: str, body: Mapping[str, Any], *, create: bool = False) -> None:
        """Write one document, refreshed (so every process lists it at once); ``create`` refuses to
        overwrite with 409."""
        await self.ensure()
        try:
            await index_doc(self.store, MODELS, body, doc_id=doc_id, create=create, refresh=True)
        except NodeConflict:
            raise Conflict(f"A model registry entry with id {doc_id} already exists") from None

    async def delete(self, doc_id: str) -> bool:
        try:
            res = await self.store.request("DELETE", url(MODELS, "_doc", doc_id), params={"refresh": "true"})
        except OpenSearchError as exc:
            if exc.status == 404:
                return False
            raise
        return bool(isinstance(res, dict) and res.get("result") == "deleted")

    async def find(
        self, kinds: Sequence[str], terms: Mapping[str, Any] | None = None, *, size: int = 1000
    ) -> list[tuple[str, dict[str, Any]]]:
        """(id, source) of the documents of ``kinds`` whose ``memproxy.<field>`` equal ``terms``, newest
        first."""
        await self.ensure()
        filters: list[dict[str, Any]] = [{"terms": {"memproxy.kind": list(kinds)}}]
        filters += [{"term": {f"memproxy.{k}": v}} for k, v in (terms or {}).items()]
        body = {
            "size": size,
            "query": {"bool": {"filter": filters}},
            "sort": [{"memproxy.created_at": {"order": "desc", "unmapped_type": "long"}}],
        }
        res = await search(self.store, MODELS, body)
        return [(h["_id"], h.get("_source") or {}) for h in res.get("hits", {}).get("hits", [])]

    async def search_view(self, kinds: Sequence[str], body: Mapping[str, Any]) -> dict[str, Any]:
        """A caller's ``_search`` body run over one API's documents: the caller's query scores, the kinds
        filter beside it, memproxy's own fields left out of every hit."""
        await self.ensure()
        narrowed = dict(body)
        query = narrowed.pop("query", None) or {"match_all": {}}
        narrowed["query"] = {"bool": {"must": [query], "filter": [{"terms": {"memproxy.kind": list(kinds)}}]}}
        source = narrowed.get("_source")
        if source is False:
            pass
        elif isinstance(source, dict):
            narrowed["_source"] = {**source, "excludes": [*source.get("excludes", []), "memproxy"]}
        else:
            includes = source if isinstance(source, list | str) else None
            narrowed["_source"] = {"excludes": ["memproxy"], **({"includes": includes} if includes else {})}
        result: dict[str, Any] = await search(self.store, MODELS, narrowed)
        return result

    async def master_key(self, fresh: str) -> tuple[str, bool]:
        """The cluster's credential key: the stored one, or ``fresh`` stored now. (key, created)."""
        await self.ensure(MODELS_CONFIG)
        doc = url(MODELS_CONFIG, "_doc", _MASTER_KEY_ID)
        try:
            await self.store.request(
                "PUT", doc, body={"key": fresh}, params={"op_type": "create", "refresh": "true"}
            )
            return fresh, True
        except OpenSearchError as exc:
            if exc.status != 409:
                raise
        res = await self.store.request("GET", doc)
        return str(res["_source"]["key"]), False
