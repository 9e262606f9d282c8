"""``memproxy inspect``: the containers and spaces memproxy holds, or one of them in detail."""

from __future__ import annotations

import argparse
import json
from typing import Any

from proxy.cli.client import OK, Api

__all__ = ["add_parser", "run"]

_EXAMPLE = """examples:
  memproxy inspect                      # every container (GoodMem spaces are containers too)
  memproxy inspect --space 0b6f...e1    # its configuration, indices, document counts, embedders
  memproxy inspect --container my-container --json"""

_PREFIX = "/_plugins/_ml/memory_containers"
_MEMORY_TYPES = ("sessions", "working", "long-term", "history")
_PAGE = 100


async def _all_containers(api: Api) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    body: dict[str, Any] = {"size": _PAGE, "query": {"match_all": {}}, "sort": [{"created_time": "asc"}]}
    while True:
        _, answer = await api.call("POST", _PREFIX + "/_search", body={**body, "from": len(found)})
        hits = (answer or {}).get("hits", {}).get("hits", [])
        found += hits
        if len(hits) < _PAGE:
            return found


def _row(hit: dict[str, Any]) -> dict[str, Any]:
    source = hit.get("_source") or {}
    cfg = source.get("configuration") or {}
    return {
        "id": hit.get("_id"),
        "kind": "space" if source.get("goodmem") is not None else "container",
        "name": source.get("name"),
        "index_prefix": cfg.get("index_prefix"),
        "embedding_model_id": cfg.get("embedding_model_id"),
        "embedding_dimension": cfg.get("embedding_dimension"),
    }


def _index_names(cfg: dict[str, Any]) -> dict[str, str]:
    """ml-commons' index naming, which memproxy keeps (docs/data-model.md); disabled types are still listed
    by name, their count says whether anything is there."""
    prefix = cfg.get("index_prefix") or "default"
    base = f".plugins-ml-am-{prefix}-memory-" if cfg.get("use_system_index", True) else f"{prefix}-memory-"
    return {t: base + t for t in _MEMORY_TYPES}


async def _count(api: Api, container_id: str, memory_type: str) -> int | None:
    body = {"size": 0, "track_total_hits": True, "query": {"match_all": {}}}
    status, answer = await api.call(
        "POST", f"{_PREFIX}/{container_id}/memories/{memory_type}/_search", body=body, ok=(400, 404)
    )
    if status >= 400:  # the type is disabled for this container
        return None
    return int((answer or {}).get("hits", {}).get("total", {}).get("value", 0))


async def _detail(api: Api, container_id: str, space: bool) -> dict[str, Any]:
    _, container = await api.call("GET", f"{_PREFIX}/{container_id}")
    cfg = container.get("configuration") or {}
    detail: dict[str, Any] = {"id": container_id, "container": container}
    names = _index_names(cfg)
    detail["indices"] = {
        t: {"index": names[t], "documents": await _count(api, container_id, t)} for t in names
    }
    embedders: list[dict[str, Any]] = []
    if space:
        _, gm = await api.call("GET", f"/v1/spaces/{container_id}")
        detail["space"] = gm
        for entry in gm.get("spaceEmbedders") or []:
            _, embedder = await api.call("GET", f"/v1/embedders/{entry.get('embedderId')}")
            embedders.append(
                {
                    "id": entry.get("embedderId"),
                    "name": embedder.get("displayName"),
                    "model": embedder.get("modelIdentifier"),
                    "dimension": embedder.get("dimensionality"),
                    "weight": entry.get("defaultRetrievalWeight"),
                }
            )
    elif cfg.get("embedding_model_id"):
        embedders.append({"id": cfg.get("embedding_model_id"), "dimension": cfg.get("embedding_dimension")})
    detail["embedders"] = embedders
    return detail


def _print_detail(detail: dict[str, Any]) -> None:
    container = detail["container"]
    print(f"id:            {detail['id']}")
    print(f"name:          {container.get('name')}")
    if container.get("description"):
        print(f"description:   {container.get('description')}")
    print("configuration:")
    for key, value in sorted((container.get("configuration") or {}).items()):
        print(f"  {key}: {json.dumps(value)}")
    print("indices:")
    for memory_type, info in detail["indices"].items():
        count = "disabled" if info["documents"] is None else f"{info['documents']} documents"
        print(f"  {memory_type:10} {info['index']}  ({count})")
    print("embedders:")
    for embedder in detail["embedders"]:
        extra = ", ".join(f"{k} {v}" for k, v in embedder.items() if k != "id" and v is not None)
        print(f"  {embedder['id']}  {extra}")


async def run(args: argparse.Namespace, api: Api) -> int:
    one = args.space or args.container
    if one:
        detail = await _detail(api, one, space=bool(args.space))
        if args.json:
            print(json.dumps(detail, ensure_ascii=False, indent=1))
        else:
            _print_detail(detail)
        return OK
    rows = [_row(hit) for hit in await _all_containers(api)]
    if args.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
        return OK
    print(f"{'KIND':9}  {'ID':36}  {'DIM':>4}  {'PREFIX':24}  NAME")
    for row in rows:
        dim = row["embedding_dimension"] or "-"
        print(f"{row['kind']:9}  {row['id']:36}  {dim!s:>4}  {row['index_prefix'] or '-':24}  {row['name']}")
    return OK


def add_parser(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    p = sub.add_parser(
        "inspect",
        parents=[common],
        help="list containers and spaces, or show one",
        description="Without --space/--container: every memory container (GoodMem spaces included) with its "
        "embedding. With one: its configuration, indices and their document counts, and its embedders.",
        epilog=_EXAMPLE + "\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--space", metavar="ID", help="a GoodMem space id")
    where.add_argument("--container", metavar="ID", help="a memory container id")
    p.add_argument("--json", action="store_true", help="JSON instead of text")
    p.set_defaults(run=run)
