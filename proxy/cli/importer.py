"""``memproxy import``: an export (``memproxy export``) into a container, streamed in one request."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tqdm import tqdm

from proxy.cli.client import OK, USAGE, Api, CliError

__all__ = ["add_parser", "run"]

_EXAMPLE = """examples:
  memproxy import backup.jsonl --container restored --create
  gunzip -c space.jsonl.gz | memproxy import - --space 0b6f...e1

Needs an administrator's key (or --auth none). The container must exist with the export's embedding
dimension, or --create makes it from the export's first line. Each batch of lines is checked completely
and written all or nothing; a bad line is reported with its line number and nothing of its batch is
written. Ids are kept, so importing into the cluster the export came from needs the original deleted first
(or a container with another index_prefix)."""

_CHUNK = 1 << 20


async def _chunks(path: str, bar: tqdm) -> AsyncIterator[bytes]:
    handle = sys.stdin.buffer if path == "-" else Path(path).open("rb")  # noqa: SIM115 - closed below
    try:
        while chunk := handle.read(_CHUNK):
            bar.update(len(chunk))
            yield chunk
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


async def run(args: argparse.Namespace, api: Api) -> int:
    if args.file != "-" and not Path(args.file).is_file():
        raise CliError(USAGE, f"{args.file}: no such file")
    container_id = args.container or args.space
    size = Path(args.file).stat().st_size if args.file != "-" else None
    bar = tqdm(
        total=size,
        unit="B",
        unit_scale=True,
        file=sys.stderr,
        disable=args.no_progress or not sys.stderr.isatty(),
    )
    params = {"create": "true"} if args.create else None
    with bar:
        answer = await api.upload(
            f"/_memproxy/containers/{container_id}/_import", _chunks(args.file, bar), params=params
        )
    by_kind = ", ".join(f"{n} {kind}" for kind, n in sorted((answer.get("by_kind") or {}).items()))
    created = " (created)" if answer.get("created") else ""
    print(f"imported {answer.get('imported')} documents into {container_id}{created} ({by_kind or 'none'})")
    return OK


def add_parser(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    p = sub.add_parser(
        "import",
        parents=[common],
        help="load an export into a container",
        description="Load a file written by memproxy export into a memory container (or space), with its "
        "ids, vectors and metadata unchanged.",
        epilog=_EXAMPLE + "\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="the export, or - for stdin")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--container", metavar="ID", help="memory container id")
    where.add_argument("--space", metavar="ID", help="GoodMem space id (the same thing)")
    p.add_argument("--create", action="store_true", help="create the container from the export if missing")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (off anyway when not a TTY)")
    p.set_defaults(run=run)
