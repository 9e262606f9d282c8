"""Export and import of a whole container (= a GoodMem space) as NDJSON, vectors included.

The format (docs/cli.md): a header line ``{"format", "version", "memory_container_id", "container"}`` whose
``container`` is the stored container document, then one line per stored document,
``{"kind", "id", "source"}``, where ``kind`` is a memory type (``sessions``, ``working``, ``long-term``,
``history``) or ``goodmem-record`` (the space's GoodMem memory records, which only memproxy can reach). Every
source is written back verbatim under its own id; only the container id it names (``memory_container_id``,
a record's ``space_id``) becomes the target's, so a container can be restored under another id. Vectors are
part of the long-term sources, so nothing is embedded again and a restored container searches exactly like
the original.

Import validates a batch of lines completely before writing any of it, and writes each batch all or nothing
(a document that exists already is a 409, and the batch's written documents are deleted again); the indices
are refreshed once at the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.container_indices import create_memory_indices, embedder_dimension, prepare_long_term
from proxy.core.container_record import MEMORY_TYPES, Container, ContainerNotFound
from proxy.core.containers import get_container
from proxy.core.services import Services
from proxy.errors import BadRequest, Conflict
from proxy.store import containers as container_docs
from proxy.store import memories as docs
from proxy.store import transfer as store
from proxy.store.client import node_error
from proxy.store.goodmem import MEMORIES, GoodMemIndices
from proxy.store.query import Term

__all__ = [
    "FORMAT",
    "GOODMEM_RECORD",
    "KINDS",
    "VERSION",
    "ImportSummary",
    "ImportTarget",
    "export_container",
    "import_container",
]

FORMAT = "memproxy-container-export"
VERSION = 1
GOODMEM_RECORD = "goodmem-record"
KINDS = (*MEMORY_TYPES, GOODMEM_RECORD)
# Lines validated and written together; a bad line keeps its whole batch out of the container.
IMPORT_BATCH = 500
# A batch's refusal names at most this many bad lines.
_MAX_REPORTED = 20

# (line number, decoded JSON value): the API slice reads and decodes the wire; a line it could not decode
# comes as the BadRequest that says why, so that the batch it belongs to is refused with every reason at once.
Lines = AsyncIterator[tuple[int, Any]]


# --- export ----------------------------------------------------------------------------------------


def _header(container: Container, source: Mapping[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "memory_container_id": container.id, "container": source}


async def export_container(svc: Services, container_id: str) -> AsyncIterator[dict[str, Any]]:
    """The lines of one container's export, one page of documents in memory at a time."""
    container = await get_container(svc, container_id)
    yield _header(container, container.source())
    for kind in MEMORY_TYPES:
        index = container.index_name(kind)
        if index is None:
            continue
        async for page in store.pages(svc.store, index, Term("memory_container_id", container.id)):
            for hit in page:
                yield {"kind": kind, "id": hit["_id"], "source": hit["_source"]}
    async for page in store.pages(svc.store, MEMORIES, Term("space_id", container.id)):
        for hit in page:
            yield {"kind": GOODMEM_RECORD, "id": hit["_id"], "source": hit["_source"]}


# --- import ----------------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    container_id: str
    created: bool
    imported: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.imported.values())


@dataclass(frozen=True)
class _Doc:
    line: int
    index: str
    id: str
    kind: str
    source: dict[str, Any]


def _json_object(line: int, value: Any) -> dict[str, Any]:
    if isinstance(value, BadRequest):
        raise BadRequest(f"line {line}: {value.message}")
    if not isinstance(value, dict):
        raise BadRequest(f"line {line}: not a JSON object")
    return value


def _read_header(line: int, raw: Any) -> dict[str, Any]:
    header = _json_object(line, raw)
    if header.get("format") != FORMAT:
        raise BadRequest(f"line {line}: not a memproxy export (the first line's format must be '{FORMAT}')")
    if header.get("version") != VERSION:
        raise BadRequest(f"line {line}: export format version {header.get('version')!r} is not {VERSION}")
    if not isinstance(header.get("container"), dict):
        raise BadRequest(f"line {line}: the header has no container object")
    return header


class ImportTarget:
    """The container written to, with what each line is checked against."""

    def __init__(self, container: Container, dimensions: Mapping[str, int]):
        self.container = container
        self.dimensions = dimensions  # knn field → dimension

    @classmethod
    async def of(cls, svc: Services, container: Container) -> ImportTarget:
        dims = {name: (await embedder_dimension(svc, eid))[1] for name, eid in container.vector_fields()}
        return cls(container, dims)

    def document(self, line: int, raw: Any) -> _Doc:
        """One line as the document to write; ``BadRequest`` naming the line when it cannot be one."""
        value = _json_object(line, raw)
        kind, doc_id, source = value.get("kind"), value.get("id"), value.get("source")
        if kind not in KINDS:
            raise BadRequest(f"line {line}: kind must be one of {', '.join(KINDS)}")
        if not isinstance(doc_id, str) or not doc_id:
            raise BadRequest(f"line {line}: id must be a non-empty string")
        if not isinstance(source, dict):
            raise BadRequest(f"line {line}: source must be a JSON object")
        source = dict(source)
        if kind == GOODMEM_RECORD:
            index = MEMORIES
            source["space_id"] = self.container.id
        else:
            memory_index = self.container.index_name(kind)
            if memory_index is None:
                raise BadRequest(f"line {line}: the container keeps no {kind} memories")
            index = memory_index
            source["memory_container_id"] = self.container.id
        if kind == "long-term":
            self._check_vectors(line, source)
        return _Doc(line, index, doc_id, kind, source)

    def _check_vectors(self, line: int, source: Mapping[str, Any]) -> None:
        for name, value in source.items():
            if not name.startswith("memory_embedding") or value is None:
                continue
            want = self.dimensions.get(name)
            if want is None:
                raise BadRequest(f"line {line}: the container has no vector field {name}")
            if not isinstance(value, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in value
            ):
                raise BadRequest(f"line {line}: {name} must be an array of numbers")
            if len(value) != want:
                raise BadRequest(f"line {line}: {name} has {len(value)} dimensions, the container {want}")


def _dimension(configuration: Mapping[str, Any]) -> Any:
    return configuration.get("embedding_dimension") if configuration.get("embedding_model_id") else None


async def _target(
    svc: Services, container_id: str, header: Mapping[str, Any], create: bool
) -> tuple[Container, bool]:
    """The existing container (same embedding dimension as the export's), or one created from the header;
    whether it was created."""
    exported: Mapping[str, Any] = header["container"]
    try:
        existing = await get_container(svc, container_id)
    except ContainerNotFound:
        if not create:
            raise ContainerNotFound(container_id) from None
        existing = None
    if existing is not None:
        mine, theirs = _dimension(existing.configuration), _dimension(exported.get("configuration") or {})
        if mine != theirs:
            raise BadRequest(
                f"The export was made with embedding dimension {theirs}, the container has {mine}: its "
                "vectors cannot be searched there"
            )
        return existing, False
    container = Container.from_source(container_id, exported)
    await prepare_long_term(svc, container)
    await container_docs.ensure_container_index(svc.store)
    await create_memory_indices(svc, container, MEMORY_TYPES)
    try:
        await docs.index_doc(
            svc.store,
            container_docs.CONTAINER_INDEX,
            exported,
            doc_id=container_id,
            create=True,
            refresh=True,
        )
    except Conflict as exc:  # created by someone else meanwhile
        raise Conflict(f"memory container id '{container_id}' already exists") from exc
    svc.caches.containers.invalidate(container_id)
    return container, True


async def _write(svc: Services, batch: Sequence[_Doc]) -> None:
    """One batch, all or nothing."""
    outcomes = await store.create_all(svc.store, [(d.index, d.id, d.source) for d in batch])
    failed = [(doc, out) for doc, out in zip(batch, outcomes, strict=True) if out.get("error")]
    if not failed:
        return
    await store.delete_ids(
        svc.store,
        [(d.index, d.id, d.source) for d, out in zip(batch, outcomes, strict=True) if not out.get("error")],
    )
    doc, out = failed[0]
    if out.get("status") == 409:
        raise Conflict(
            f"line {doc.line}: a document with id {doc.id} exists already in {doc.index}; nothing of lines "
            f"{batch[0].line}-{batch[-1].line} was imported"
        )
    raise node_error(int(out.get("status") or 500), out["error"])


async def import_container(
    svc: Services, container_id: str, lines: Lines, *, create: bool = False, batch_size: int = IMPORT_BATCH
) -> ImportSummary:
    """Read an export's lines (:data:`Lines`, blank lines left out) into container ``container_id``.

    The container must exist with the export's embedding dimension, or ``create`` makes it from the header.
    Batches written before a refused one stay written (the refusal says from which line nothing was).
    """
    first = await anext(lines, None)
    if first is None:
        raise BadRequest("The import is empty: the first line must be an export header")
    header = _read_header(*first)
    container, created = await _target(svc, container_id, header, create)
    target = await ImportTarget.of(svc, container)
    summary = ImportSummary(container_id=container_id, created=created)
    # The records' index may be missing on a fresh cluster, and must get its own mapping, not a dynamic one.
    await GoodMemIndices(svc.store).ensure(MEMORIES)
    touched: set[str] = set()
    try:
        batch: list[tuple[int, Any]] = []
        async for line in lines:
            batch.append(line)
            if len(batch) >= batch_size:
                await _import_batch(svc, target, batch, summary, touched)
                batch = []
        if batch:
            await _import_batch(svc, target, batch, summary, touched)
    finally:
        await store.refresh(svc.store, touched)
    return summary


async def _import_batch(
    svc: Services,
    target: ImportTarget,
    batch: Sequence[tuple[int, Any]],
    summary: ImportSummary,
    touched: set[str],
) -> None:
    parsed: list[_Doc] = []
    errors: list[str] = []
    for line, raw in batch:
        try:
            parsed.append(target.document(line, raw))
        except BadRequest as exc:
            errors.append(exc.message)
    if errors:
        more = f" (and {len(errors) - _MAX_REPORTED} more)" if len(errors) > _MAX_REPORTED else ""
        raise BadRequest(
            f"Invalid import lines, nothing of lines {batch[0][0]}-{batch[-1][0]} was imported: "
            + "; ".join(errors[:_MAX_REPORTED])
            + more
        )
    touched.update(d.index for d in parsed)
    await _write(svc, parsed)
    for doc in parsed:
        summary.imported[doc.kind] = summary.imported.get(doc.kind, 0) + 1
