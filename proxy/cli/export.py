"""``memproxy export``: a container (or space) as NDJSON with vectors and metadata (docs/cli.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from proxy.cli.client import OK, Api

__all__ = ["add_parser", "run"]

_EXAMPLE = """examples:
  memproxy export --container my-container -o backup.jsonl
  memproxy export --space 0b6f...e1 - | gzip > space.jsonl.gz
  memproxy import backup.jsonl --container restored --create

Needs an administrator's key (or --auth none). The first line is the container itself, each further line
one stored document: {"kind", "id", "source"}, kind one of long-term, working, sessions, history and
goodmem-record."""


@contextlib.contextmanager
def _output(name: str) -> Iterator[IO[bytes]]:
    if name == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    # Written next to the target and renamed at the end: an interrupted export never leaves a file that
    # looks complete.
    path = Path(name)
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("wb") as handle:
        yield handle
    tmp.replace(path)


async def run(args: argparse.Namespace, api: Api) -> int:
    container_id = args.container or args.space
    kinds: Counter[str] = Counter()
    bar = tqdm(unit="line", file=sys.stderr, disable=args.no_progress or not sys.stderr.isatty())
    header = True
    with bar, _output(args.output) as out:
        async for line in api.lines("GET", f"/_memproxy/containers/{container_id}/_export"):
            if not line.strip():
                continue
            out.write(line + b"\n")
            if not header:
                kinds[_kind(line)] += 1
            header = False
            bar.update(1)
    by_kind = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()) if count)
    print(
        f"exported {sum(kinds.values())} documents of {container_id} ({by_kind or 'none'})", file=sys.stderr
    )
    return OK


def _kind(line: bytes) -> str:
    value: Any = json.loads(line)
    return str(value.get("kind")) if isinstance(value, dict) else "?"


def add_parser(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    p = sub.add_parser(
        "export",
        parents=[common],
        help="write a container or space as JSONL (vectors included)",
        description="Write a memory container (a GoodMem space is one) as JSONL: its definition, then every "
        "stored document with its vectors and metadata, to back it up or move it to another cluster.",
        epilog=_EXAMPLE + "\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--container", metavar="ID", help="memory container id")
    where.add_argument("--space", metavar="ID", help="GoodMem space id (the same thing)")
    p.add_argument(
        "-o", "--output", default="-", metavar="FILE", help="output file, or - for stdout (default)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar (off anyway when not a TTY)")
    p.set_defaults(run=run)
