"""``memproxy search``: GoodMem retrieve over spaces, or ml-commons semantic search in a container."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.cli.client import OK, USAGE, Api, CliError
from proxy.cli.ingest import parse_pairs

__all__ = ["Hit", "add_parser", "run"]

_EXAMPLE = """examples:
  memproxy search "what tea does the user like" --space 0b6f...e1 --k 5
  memproxy search "tea" --space S1 --space S2 --filter "CAST(val('$.topic') AS TEXT) = 'food'"
  memproxy search "tea" --container my-container --namespace user_id=u1 --min-score 0.6 --json

Scores are the API's own: GoodMem's relevanceScore (memproxy sends -cosine by default, GoodMem's convention:
more negative is better) and ml-commons' _score ((1 + cosine) / 2). --min-score is the request's min_score
for a container; for spaces it keeps items whose |relevanceScore| (the cosine) is at least the value."""

_EXCERPT = 80


@dataclass(frozen=True)
class Hit:
    score: float
    id: str
    memory_id: str
    text: str
    metadata: dict[str, Any]

    def json(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "id": self.id,
            "memoryId": self.memory_id,
            "text": self.text,
            "metadata": self.metadata,
        }


async def _retrieve(api: Api, args: argparse.Namespace) -> list[Hit]:
    keys: list[dict[str, Any]] = []
    for space_id in args.space:
        key: dict[str, Any] = {"spaceId": space_id}
        if args.filter is not None:
            key["filter"] = args.filter
        keys.append(key)
    body = {"message": args.query, "spaceKeys": keys, "requestedSize": args.k, "fetchMemory": False}
    hits: list[Hit] = []
    async for raw in api.lines(
        "POST", "/v1/memories:retrieve", body=body, headers={"Accept": "application/x-ndjson"}
    ):
        if not raw.strip():
            continue
        event = json.loads(raw)
        item = event.get("retrievedItem")
        if item is None:
            status = event.get("status")
            if status is not None:
                print(f"memproxy search: {status.get('code')}: {status.get('message')}", file=sys.stderr)
            continue
        chunk = (item.get("chunk") or {}).get("chunk") or {}
        score = float((item.get("chunk") or {}).get("relevanceScore") or 0.0)
        if args.min_score is not None and abs(score) < args.min_score:
            continue
        hits.append(
            Hit(
                score,
                str(chunk.get("chunkId")),
                str(chunk.get("memoryId")),
                str(chunk.get("chunkText") or ""),
                dict(chunk.get("metadata") or {}),
            )
        )
    return hits


async def _semantic(api: Api, args: argparse.Namespace) -> list[Hit]:
    body: dict[str, Any] = {"query": args.query, "k": args.k}
    if args.namespace:
        body["namespace"] = parse_pairs(args.namespace, "--namespace")
    if args.min_score is not None:
        body["min_score"] = args.min_score
    if args.filter is not None:
        try:
            body["filter"] = json.loads(args.filter)
        except ValueError:
            raise CliError(USAGE, "--filter of a container search is a Query DSL object in JSON") from None
    path = f"/_plugins/_ml/memory_containers/{args.container}/memories/long-term/_semantic_search"
    _, answer = await api.call("POST", path, body=body)
    out: list[Hit] = []
    for hit in (answer or {}).get("hits", {}).get("hits", []):
        source = hit.get("_source") or {}
        out.append(
            Hit(
                float(hit.get("_score") or 0.0),
                str(hit.get("_id")),
                str(source.get("memory_id") or hit.get("_id")),
                str(source.get("memory") or ""),
                dict(source.get("metadata") or {}),
            )
        )
    return out


def excerpt(text: str, width: int = _EXCERPT) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def table(hits: Iterable[Hit]) -> str:
    rows = [f"{'SCORE':>9}  {'ID':36}  TEXT"]
    rows += [f"{h.score:9.4f}  {h.id:36}  {excerpt(h.text)}" for h in hits]
    return "\n".join(rows)


async def run(args: argparse.Namespace, api: Api) -> int:
    if not 1 <= args.k <= 10_000:
        raise CliError(USAGE, "--k must be between 1 and 10000")
    if args.space and args.namespace:
        raise CliError(USAGE, "--namespace applies to a container (GoodMem spaces have none)")
    hits = await (_retrieve(api, args) if args.space else _semantic(api, args))
    if args.json:
        for hit in hits:
            print(json.dumps(hit.json(), ensure_ascii=False))
    else:
        print(table(hits))
    return OK


def add_parser(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    p = sub.add_parser(
        "search",
        parents=[common],
        help="semantic search in spaces or a container",
        description="Search GoodMem spaces (memories:retrieve) or a memory container (_semantic_search) and "
        "print the hits best first: a table of score, id and a text excerpt, or JSON lines with --json.",
        epilog=_EXAMPLE + "\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", metavar="QUERY", help="the text to search for")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--space", metavar="ID", action="append", help="GoodMem space id; repeatable")
    where.add_argument("--container", metavar="ID", help="memory container id")
    p.add_argument("--k", type=int, default=10, metavar="N", help="how many hits (default 10)")
    p.add_argument(
        "--filter",
        metavar="EXPR",
        help="spaces: a GoodMem filter expression; container: a Query DSL filter object (JSON)",
    )
    p.add_argument("--namespace", action="append", default=[], metavar="K=V", help="container namespace term")
    p.add_argument("--min-score", type=float, metavar="X", help="drop hits scoring below X (see below)")
    p.add_argument("--json", action="store_true", help="one JSON object per hit instead of a table")
    p.set_defaults(run=run)
