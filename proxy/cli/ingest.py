"""``memproxy ingest``: JSONL, text and Markdown files (or folders of them) into a space or a container.

Resumable and idempotent. Every memory gets an id derived from the target, the file's path relative to the
root it was found under and its line number (unless the line names one), so a second run writes nothing
twice: GoodMem answers 409 for an id it has (counted as skipped), and for a container, whose add-memory API
takes no id, the derived id travels in the memory's metadata (``memproxy_ingest_id``) and each batch first
asks which of its ids are stored. A small state file remembers the files that went in completely, so a re-run
skips them without reading them.

A batch is validated completely before it is sent: one malformed JSONL line keeps its whole batch out (each
bad line is reported as ``file:line: reason``) and the command exits 1 at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from proxy.cli.client import FAILED, OK, USAGE, Api, ApiError, CliError

__all__ = [
    "INGEST_ID_KEY",
    "WORKING_NOTE",
    "Item",
    "LineError",
    "Source",
    "add_parser",
    "collect_sources",
    "derive_id",
    "parse_jsonl_line",
    "parse_pairs",
    "read_entries",
    "run",
]

JSONL_SUFFIXES = (".jsonl", ".ndjson")
TEXT_SUFFIXES = (".txt", ".md", ".markdown")
# The namespace of derived memory ids (uuid5): fixed forever, or a re-run would no longer recognise its ids.
INGEST_NAMESPACE = uuid.UUID("5b0c1f5e-7a56-4c53-9d1e-6d656d70726f")
# Where a container's memories keep their derived id (the ml-commons add-memory API takes none).
INGEST_ID_KEY = "memproxy_ingest_id"
_JSONL_FIELDS = ("content", "text", "metadata", "memoryId")
# A whole-request refusal worth retrying: a full embedding queue, an overloaded cluster.
_RETRY_STATUSES = (429, 502, 503, 504)
_RETRIES = 5
_CONTAINER_IN_FLIGHT = 8
WORKING_NOTE = (
    "memproxy ingest: note: these are working memories (infer: false), which semantic search (memproxy "
    "search --container) does not find; to make them searchable, ingest with --space {id} (the same "
    "container, as a GoodMem space)."
)

_EXAMPLE = """examples:
  memproxy ingest notes/ --space 0b6f...e1 --metadata source=notes
  memproxy ingest facts.jsonl --container my-container --batch-size 50

JSONL lines: {"content" or "text": "...", "metadata": {...}, "memoryId": "<uuid>"} (metadata and
memoryId optional). A .txt / .md file is one memory. Re-running the same command skips what is stored."""


def derive_id(target: str, rel_path: str, line: int) -> str:
    """The id of the memory at ``line`` (0: a whole text file) of ``rel_path`` for ``target``."""
    return str(uuid.uuid5(INGEST_NAMESPACE, f"{target}\n{rel_path}\n{line}"))


@dataclass(frozen=True)
class Source:
    path: Path
    rel: str  # relative to the folder it was found in (a file named directly: its name)

    @property
    def is_jsonl(self) -> bool:
        return self.path.suffix.lower() in JSONL_SUFFIXES


@dataclass(frozen=True)
class Item:
    source: Source
    line: int
    memory_id: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class LineError:
    source: Source
    line: int
    reason: str

    def __str__(self) -> str:
        where = f"{self.source.path}:{self.line}" if self.line else str(self.source.path)
        return f"{where}: {self.reason}"


Entry = Item | LineError


def collect_sources(paths: Sequence[str]) -> list[Source]:
    """The files to read: each file named, and every JSONL / text / Markdown file under each folder named
    (sorted, so ids and order are the same on every run)."""
    found: list[Source] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            for file in sorted(p for p in path.rglob("*") if p.is_file()):
                if file.suffix.lower() in JSONL_SUFFIXES + TEXT_SUFFIXES:
                    found.append(Source(file, file.relative_to(path).as_posix()))
        elif path.is_file():
            if path.suffix.lower() not in JSONL_SUFFIXES + TEXT_SUFFIXES:
                raise CliError(USAGE, f"{name}: not a .jsonl, .ndjson, .txt or .md file")
            found.append(Source(path, path.name))
        else:
            raise CliError(USAGE, f"{name}: no such file or folder")
    return found


def parse_pairs(pairs: Sequence[str], what: str) -> dict[str, str]:
    """``k=v`` arguments as a map; a usage error for one without ``=``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(USAGE, f"{what} must be key=value, not {pair!r}")
        out[key] = value
    return out


def parse_jsonl_line(
    raw: str, *, source: Source, line: int, target: str, defaults: Mapping[str, Any]
) -> Item:
    """One JSONL line as a memory; ``ValueError`` saying what is wrong with it."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(value) - set(_JSONL_FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (allowed: {', '.join(_JSONL_FIELDS)})")
    if ("content" in value) == ("text" in value):
        raise ValueError('exactly one of "content" and "text" is required')
    text = value.get("content", value.get("text"))
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the text must be a non-empty string")
    metadata = value.get("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError("metadata must be a JSON object")
    memory_id = value.get("memoryId")
    if memory_id is None:
        memory_id = derive_id(target, source.rel, line)
    else:
        try:
            memory_id = str(uuid.UUID(str(memory_id))) if isinstance(memory_id, str) else None
        except ValueError:
            memory_id = None
        if memory_id is None:
            raise ValueError("memoryId must be a UUID")
    return Item(source, line, memory_id, text, {**defaults, **metadata})


def read_entries(source: Source, target: str, defaults: Mapping[str, Any]) -> Iterator[Entry]:
    """The memories of one file (or why a line cannot be one), in file order."""
    if not source.is_jsonl:
        try:
            text = source.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            yield LineError(source, 0, f"cannot read: {exc}")
            return
        if text.strip():
            yield Item(source, 0, derive_id(target, source.rel, 0), text, dict(defaults))
        else:
            yield LineError(source, 0, "empty file")
        return
    with source.path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                yield parse_jsonl_line(
                    raw.decode("utf-8"), source=source, line=number, target=target, defaults=defaults
                )
            except UnicodeDecodeError:
                yield LineError(source, number, "not UTF-8")
            except ValueError as exc:
                yield LineError(source, number, str(exc))


def count_entries(source: Source) -> int:
    if not source.is_jsonl:
        return 1
    with source.path.open("rb") as handle:
        return sum(1 for raw in handle if raw.strip())


# --- the state file --------------------------------------------------------------------------------


class State:
    """Files that went in completely (by path, size and modification time) and how many memories each held."""

    def __init__(self, path: Path, target: str, files: dict[str, Any]):
        self.path = path
        self.target = target
        self.files = files

    @classmethod
    def load(cls, path: Path, target: str) -> State:
        try:
            data = json.loads(path.read_text())
            files = (
                data["files"] if data.get("target") == target and isinstance(data.get("files"), dict) else {}
            )
        except (OSError, ValueError, KeyError, AttributeError):
            files = {}
        return cls(path, target, files)

    @staticmethod
    def _fingerprint(source: Source) -> dict[str, int]:
        stat = source.path.stat()
        return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}

    def done(self, source: Source) -> int | None:
        """How many memories ``source`` held if it went in completely and has not changed since."""
        entry = self.files.get(str(source.path.resolve()))
        if isinstance(entry, dict) and {k: entry.get(k) for k in ("size", "mtime_ns")} == self._fingerprint(
            source
        ):
            return int(entry.get("memories", 0))
        return None

    def mark(self, source: Source, memories: int) -> None:
        self.files[str(source.path.resolve())] = {**self._fingerprint(source), "memories": memories}

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"target": self.target, "files": self.files}, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:  # a read-only input folder: the run still works, only not the fast skip
            print(f"memproxy ingest: cannot write the state file {self.path}: {exc}", file=sys.stderr)


# --- writing ---------------------------------------------------------------------------------------

# An item's outcome: "created", "skipped", or the API's message for a failure.
Outcome = str


async def _retrying(call: Any) -> Any:
    for attempt in range(_RETRIES):
        try:
            return await call()
        except ApiError as exc:
            if exc.status not in _RETRY_STATUSES or attempt + 1 == _RETRIES:
                raise
            await asyncio.sleep(0.5 * 2**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


class SpaceWriter:
    """GoodMem ``memories:batchCreate``: one request per batch; 409 (the id exists) is a skip."""

    def __init__(self, space_id: str):
        self.target = space_id

    async def check(self, api: Api) -> None:
        await api.call("GET", f"/v1/spaces/{self.target}")

    async def write(self, api: Api, items: Sequence[Item]) -> list[Outcome]:
        requests = []
        for item in items:
            request: dict[str, Any] = {
                "spaceId": self.target,
                "memoryId": item.memory_id,
                "originalContent": item.text,
                "contentType": "text/markdown"
                if item.source.path.suffix.lower() in (".md", ".markdown")
                else "text/plain",
            }
            if item.metadata:
                request["metadata"] = item.metadata
            requests.append(request)
        _, body = await _retrying(
            lambda: api.call("POST", "/v1/memories:batchCreate", body={"requests": requests}, ok=(200, 207))
        )
        results = body.get("results", [])
        errors = [r.get("error") or {} for r in results if not r.get("success")]
        if results and len(errors) == len(results) and all(e.get("code") == 404 for e in errors):
            # The space itself is gone (deleted while this ran): every further batch would fail the same way.
            raise ApiError(404, str(errors[0].get("message") or "Space not found"))
        outcomes: list[Outcome] = []
        for result in results:
            if result.get("success"):
                outcomes.append("created")
            elif (result.get("error") or {}).get("code") == 409:
                outcomes.append("skipped")
            else:
                outcomes.append(str((result.get("error") or {}).get("message") or result))
        return outcomes


class ContainerWriter:
    """ml-commons add-memory (``infer: false``, one request per memory, several in flight), after one search
    for the batch's ids that are stored already."""

    def __init__(self, container_id: str):
        self.target = container_id
        self.base = f"/_plugins/_ml/memory_containers/{container_id}"
        self.has_embedding = False

    async def check(self, api: Api) -> None:
        _, container = await api.call("GET", self.base)
        self.has_embedding = bool(((container or {}).get("configuration") or {}).get("embedding_model_id"))

    async def _stored(self, api: Api, ids: list[str]) -> set[str]:
        query = {
            "size": len(ids),
            "_source": ["metadata"],
            "query": {"terms": {f"metadata.{INGEST_ID_KEY}": ids}},
        }
        _, body = await _retrying(
            lambda: api.call("POST", self.base + "/memories/working/_search", body=query)
        )
        hits = (body or {}).get("hits", {}).get("hits", [])
        return {str((h.get("_source") or {}).get("metadata", {}).get(INGEST_ID_KEY)) for h in hits}

    async def write(self, api: Api, items: Sequence[Item]) -> list[Outcome]:
        stored = await self._stored(api, [item.memory_id for item in items])
        room = asyncio.Semaphore(_CONTAINER_IN_FLIGHT)

        async def one(item: Item) -> Outcome:
            if item.memory_id in stored:
                return "skipped"
            body = {
                "messages": [{"role": "user", "content": [{"type": "text", "text": item.text}]}],
                "infer": False,
                # ml-commons keeps metadata as a map of strings.
                "metadata": {
                    **{k: _as_text(v) for k, v in item.metadata.items()},
                    INGEST_ID_KEY: item.memory_id,
                },
            }
            async with room:
                try:
                    await _retrying(lambda: api.call("POST", self.base + "/memories", body=body))
                except ApiError as exc:
                    if exc.code != FAILED:  # the key was refused: no point in trying the rest
                        raise
                    return exc.message
            return "created"

        return list(await asyncio.gather(*(one(item) for item in items)))


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# --- the command -----------------------------------------------------------------------------------


@dataclass
class _Tally:
    created: int = 0
    skipped: int = 0
    failed: int = 0
    # Per file: memories written or found, failures, and the total once the file has been read through.
    ok: dict[Source, int] = field(default_factory=dict)
    bad: dict[Source, int] = field(default_factory=dict)
    total: dict[Source, int] = field(default_factory=dict)


def _state_path(args: argparse.Namespace, kind: str, target: str) -> Path:
    if args.state_dir:
        folder = Path(args.state_dir)
    else:
        first = Path(args.paths[0])
        folder = first if first.is_dir() else first.parent
    return folder / f".memproxy-ingest-{kind}-{target}.json"


async def run(args: argparse.Namespace, api: Api) -> int:
    if args.batch_size < 1:
        raise CliError(USAGE, "--batch-size must be at least 1")
    kind, target = ("space", args.space) if args.space else ("container", args.container)
    writer: SpaceWriter | ContainerWriter = SpaceWriter(target) if args.space else ContainerWriter(target)
    defaults = parse_pairs(args.metadata, "--metadata")
    sources = collect_sources(args.paths)
    await writer.check(api)
    state = State.load(_state_path(args, kind, target), f"{kind}:{target}")
    tally = _Tally()
    todo: list[Source] = []
    for source in sources:
        done = state.done(source) if args.resume else None
        if done is None:
            todo.append(source)
        else:
            tally.skipped += done
    bar = tqdm(
        total=sum(count_entries(s) for s in todo),
        unit="memory",
        file=sys.stderr,
        disable=args.no_progress or not sys.stderr.isatty(),
        dynamic_ncols=True,
    )

    def record_done() -> None:
        # A file is done once read through and every memory of it is stored: the next run skips it unread.
        finished = [
            source
            for source, total in tally.total.items()
            if tally.ok.get(source, 0) == total and not tally.bad.get(source) and state.done(source) is None
        ]
        for source in finished:
            state.mark(source, tally.total[source])
        if finished:
            state.save()

    with bar:
        batch: list[Entry] = []
        for source in todo:
            read = 0
            for entry in read_entries(source, target, defaults):
                read += 1
                batch.append(entry)
                if len(batch) >= args.batch_size:
                    await _send(api, writer, batch, tally, bar)
                    batch = []
                    record_done()
            tally.total[source] = read
        if batch:
            await _send(api, writer, batch, tally, bar)
        record_done()
    print(f"created {tally.created}, skipped {tally.skipped}, failed {tally.failed}")
    if isinstance(writer, ContainerWriter) and writer.has_embedding:
        # The ml-commons trap (issue 29): messages added with infer false are never semantically searched, so
        # `memproxy search --container` right after this finds none of them. Say so, and what does work.
        print(WORKING_NOTE.format(id=target), file=sys.stderr)
    return FAILED if tally.failed else OK


async def _send(
    api: Api, writer: SpaceWriter | ContainerWriter, batch: list[Entry], tally: _Tally, bar: tqdm
) -> None:
    errors = [e for e in batch if isinstance(e, LineError)]
    if errors:
        for error in errors:
            bar.write(str(error), file=sys.stderr)
        first = batch[0]
        bar.write(
            f"{first.source.path}:{first.line}: this batch of {len(batch)} was not written (bad lines above)",
            file=sys.stderr,
        )
        for entry in batch:
            tally.bad[entry.source] = tally.bad.get(entry.source, 0) + 1
        tally.failed += len(batch)
        bar.update(len(batch))
        return
    items = [e for e in batch if isinstance(e, Item)]
    outcomes = await writer.write(api, items)
    for item, outcome in zip(items, outcomes, strict=True):
        if outcome in ("created", "skipped"):
            tally.ok[item.source] = tally.ok.get(item.source, 0) + 1
            if outcome == "created":
                tally.created += 1
            else:
                tally.skipped += 1
        else:
            tally.bad[item.source] = tally.bad.get(item.source, 0) + 1
            tally.failed += 1
            bar.write(f"{LineError(item.source, item.line, outcome)}", file=sys.stderr)
    bar.update(len(items))


def add_parser(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    p = sub.add_parser(
        "ingest",
        parents=[common],
        help="load JSONL / text / Markdown files into a space or container",
        description="Load JSONL, text and Markdown files (or folders of them, recursively) into a GoodMem "
        "space or an ml-commons memory container, in batches, resumably: a re-run skips what is stored.",
        epilog=_EXAMPLE + "\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="files (.jsonl, .ndjson, .txt, .md) or folders")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--space", metavar="ID", help="GoodMem space id (memories:batchCreate)")
    where.add_argument(
        "--container",
        metavar="ID",
        help="memory container id (working memories, infer false: not semantically searched; --space with "
        "the container's id writes searchable ones)",
    )
    p.add_argument(
        "--batch-size", type=int, default=100, metavar="N", help="memories per batch (default 100)"
    )
    p.add_argument(
        "--metadata",
        action="append",
        default=[],
        metavar="K=V",
        help="metadata added to every memory (a line's own metadata wins); repeatable",
    )
    p.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="skip files the state file records as done (default: on); ids make a re-run safe either way",
    )
    p.add_argument(
        "--state-dir", metavar="DIR", help="where the state file goes (default: next to the input)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (off anyway when not a TTY)")
    p.set_defaults(run=run)
