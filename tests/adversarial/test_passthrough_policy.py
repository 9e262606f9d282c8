"""Pass-through on the canonical path (issue 24, item 6): an administrator reaches no private index by any
member of the bypass classes found, and what is legitimate is forwarded.

Requests go out through ``http.client`` so the path is sent byte for byte (no client normalises the dot
segments or doubled slashes under test). Every refusal must be a 400/403 in OpenSearch's error shape, and
nothing may have been written: the instance record is intact afterwards.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

pytestmark = pytest.mark.timeout(600)

SYSTEM = "memproxy-goodmem-system"
KEYS = "memproxy-goodmem-apikeys"
USERS = "memproxy-goodmem-users"
PRIVATE_MARKERS = ("memproxy-goodmem-", ".plugins-ml-am-memory-container")


@dataclass(frozen=True)
class Answer:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def raw(base: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
    """One request with ``path`` sent exactly as written."""
    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=120)
    sent = dict(headers or {})
    data: bytes | None = None
    if isinstance(body, (bytes, str)):
        data = body.encode() if isinstance(body, str) else body
        sent.setdefault("Content-Type", "application/x-ndjson")
    elif body is not None:
        data = json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=sent)
        resp = conn.getresponse()
        return Answer(resp.status, resp.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def ndjson(*lines: Any) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


@dataclass(frozen=True)
class World:
    proxy: str
    node: str
    admin: dict[str, str]
    pub: str  # a public index of this test, holding document "1"
    alias: str  # a rollover alias on it


@pytest.fixture(scope="module")
def world(proxy_url: str, opensearch_url: str, admin_headers: dict[str, str]) -> Iterator[World]:
    pub = f"pp-policy-{uuid.uuid4().hex[:10]}"
    with httpx.Client(base_url=opensearch_url, timeout=60) as node:
        assert node.put(
            f"/{pub}-000001", json={"aliases": {f"{pub}-alias": {"is_write_index": True}}}
        ).is_success
        node.put(f"/{pub}-000001/_doc/1", params={"refresh": "true"}, json={"title": "public", "n": 1})
        node.put(f"/{pub}-000001/_settings", json={"index.blocks.write": False})
        yield World(proxy_url, opensearch_url, dict(admin_headers), f"{pub}-000001", f"{pub}-alias")
        node.delete(f"/{pub}-*")
        node.delete(f"/_index_template/{pub}-000001-tpl")
        node.delete(f"/_template/{pub}-000001-tpl")


def _instance(w: World) -> Any:
    return httpx.get(f"{w.node}/{SYSTEM}/_doc/instance", timeout=30).json()


def _bypasses(w: World) -> list[tuple[str, str, str, Any]]:
    """(class, method, path, body): each must be refused."""
    p, a = w.pub, w.alias
    lookup_terms = {"query": {"terms": {"user_id": {"index": USERS, "id": "x", "path": "email"}}}}
    shape = {
        "query": {
            "geo_shape": {"loc": {"indexed_shape": {"index": SYSTEM, "id": "instance", "path": "master_key"}}}
        }
    }
    mlt = {"query": {"more_like_this": {"fields": ["title"], "like": [{"_index": KEYS, "_id": "x"}]}}}
    percolate = {"query": {"percolate": {"field": "q", "index": USERS, "id": "x"}}}
    return [
        # Dot segments, encoded in every case, and doubled slashes.
        ("dot", "GET", f"/{p}/%2e%2e/{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}/%2E%2E/{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}/%2e%2E/{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}/.%2e/{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}/%2e./{SYSTEM}/_doc/instance", None),
        ("dot", "PUT", f"/{p}/%2e%2e/{SYSTEM}/_doc/pwned", {"x": 1}),
        ("dot", "DELETE", f"/{p}/%2e%2e/{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}/%2e/_doc/1", None),
        ("dot", "GET", f"/./{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"//{SYSTEM}/_doc/instance", None),
        ("dot", "GET", f"/{p}//_doc/1", None),
        # _msearch headers: `indices` as well as `index`.
        ("msearch", "POST", "/_msearch", ndjson({"indices": [USERS]}, {})),
        ("msearch", "POST", "/_msearch", ndjson({"indices": USERS}, {})),
        ("msearch", "POST", "/_msearch", ndjson({"index": p, "indices": [SYSTEM]}, {})),
        ("msearch", "POST", f"/{p}/_msearch", ndjson({}, {}, {"indices": "memproxy-goodmem-*"}, {})),
        # _bulk: extra keys, shifted lines, duplicate keys, other separators.
        ("bulk", "POST", "/_bulk", ndjson({"index": {"_index": KEYS, "_id": "pwned"}, "x": 1}, {"a": 1})),
        ("bulk", "POST", "/_bulk", ndjson({"x": {}, "delete": {"_index": KEYS, "_id": "pwned"}})),
        ("bulk", "POST", "/_bulk", ndjson({"delete": {"_index": KEYS, "_id": "pwned", "extra": 1}})),
        (
            "bulk",
            "POST",
            f"/{p}/_bulk",
            ndjson({"index": {"_id": "2"}}, "", {"delete": {"_index": SYSTEM, "_id": "instance"}}),
        ),
        ("bulk", "POST", "/_bulk", f'{{"delete":{{"_index":"{p}","_index":"{SYSTEM}","_id":"instance"}}}}\n'),
        (
            "bulk",
            "POST",
            "/_bulk",
            f'{{"index":{{"_index":"{p}"}}}}\r{{"delete":{{"_index":"{SYSTEM}","_id":"instance"}}}}\n',
        ),
        (
            "bulk",
            "POST",
            f"/{p}/_bulk",
            ndjson({"update": {"_id": "1"}}, {"doc": {"a": 1}}, {"delete": {"_index": SYSTEM}}),
        ),
        # Lookups in every forwarded search-like body.
        ("lookup", "POST", f"/{p}/_validate/query?rewrite=true", lookup_terms),
        ("lookup", "POST", f"/{p}/_explain/1", shape),
        ("lookup", "POST", f"/{p}/_search", mlt),
        ("lookup", "POST", f"/{p}/_count", percolate),
        ("lookup", "POST", "/_msearch", ndjson({"index": p}, lookup_terms)),
        ("lookup", "POST", f"/{p}/_delete_by_query", lookup_terms),
        ("lookup", "POST", f"/{p}/_update_by_query", shape),
        ("lookup", "POST", f"/{p}/_search/template", {"source": json.dumps(lookup_terms)}),
        (
            "lookup",
            "POST",
            "/_aliases",
            {"actions": [{"add": {"index": p, "alias": f"{p}-f", "filter": lookup_terms["query"]}}]},
        ),
        # New indices under private names.
        ("new", "POST", f"/{p}/_clone/memproxy-goodmem-pwned", None),
        ("new", "POST", f"/{p}/_split/memproxy-goodmem-pwned", None),
        ("new", "POST", f"/{p}/_shrink/memproxy-jobs-pwned", None),
        ("new", "POST", f"/{p}/_shrink/%3Cmemproxy-goodmem-%7Bnow%2Fd%7D%3E", None),
        ("new", "POST", f"/{a}/_rollover/memproxy-goodmem-pwned", None),
        ("new", "PUT", "/%3Cmemproxy-goodmem-%7Bnow%2Fd%7D%3E", None),
        ("new", "PUT", f"/{p}-x", {"aliases": {"memproxy-goodmem-users-alias": {}}}),
        (
            "new",
            "PUT",
            f"/_index_template/{p}-tpl",
            {"index_patterns": ["memproxy-goodmem-*"], "template": {}},
        ),
        ("new", "PUT", f"/_template/{p}-tpl", {"index_patterns": ["memproxy*"]}),
        # Aliases onto private indices, in every form.
        ("alias", "PUT", f"/{KEYS}/_alias/{p}-stolen", None),
        ("alias", "PUT", f"/_alias/{p}-stolen", {"index": KEYS}),
        ("alias", "POST", f"/_aliases/{p}-stolen", {"index": KEYS}),
        ("alias", "PUT", "/_alias", {"index": USERS, "alias": f"{p}-stolen"}),
        ("alias", "PUT", f"/{p}/_alias/{p}-stolen", {"indices": [USERS]}),
        (
            "alias",
            "POST",
            "/_aliases",
            {"actions": [{"add": {"indices": [p, USERS], "alias": f"{p}-stolen"}}]},
        ),
        (
            "alias",
            "POST",
            "/_aliases",
            {"actions": [{"add": {"index": p, "aliases": ["memproxy-goodmem-x"]}}]},
        ),
        ("alias", "POST", "/_aliases", {"actions": [{"remove_index": {"index": "memproxy-goodmem-*"}}]}),
        # Index-less settings and mapping writes (harmless values: the default ones).
        ("reconfigure", "PUT", "/_settings", {"index": {"max_result_window": 10000}}),
        ("reconfigure", "PUT", "/_all/_settings", {"index": {"max_result_window": 10000}}),
        ("reconfigure", "PUT", "/*/_settings", {"index": {"max_result_window": 10000}}),
        ("reconfigure", "PUT", "/_mapping", {"properties": {}}),
        # Metadata of a private index, named.
        ("metadata", "GET", f"/{USERS}/_mapping", None),
        ("metadata", "GET", f"/_cat/count/{USERS}", None),
        ("metadata", "GET", f"/_cluster/state/metadata/{KEYS}", None),
        ("metadata", "GET", "/_cat/indices/memproxy-goodmem-users", None),
        # Path parameters smuggled in the query string (the node reads them when the path lacks them).
        ("query", "GET", f"/_cat/indices?index={USERS}", None),
        ("query", "GET", f"/_mapping?index={SYSTEM}", None),
        ("query", "POST", f"/_bulk?index={KEYS}", ndjson({"delete": {"_id": "x"}})),
        ("query", "POST", f"/_msearch?%69ndex={USERS}", ndjson({}, {})),
        ("query", "GET", f"/_cat/count?index={USERS}", None),
        ("query", "GET", f"/_cat/indices?index={p}&index={USERS}", None),
        ("query", "POST", f"/_alias/{p}-stolen?index={USERS}", None),
        ("query", "POST", f"/_aliases?name={p}-stolen", {"actions": []}),
        # Not on the allowlist at all.
        ("unknown", "POST", "/_plugins/_sql", {"query": f"SELECT * FROM {KEYS}"}),
        ("unknown", "GET", "/_made_up_endpoint", None),
        ("unknown", "POST", "/_snapshot/repo/snap/_restore", {"indices": KEYS}),
    ]


def test_every_bypass_is_refused(world: World) -> None:
    w = world
    before = _instance(w)
    assert before["found"] is True
    failures = []
    for kind, method, path, body in _bypasses(w):
        got = raw(w.proxy, method, path, body, w.admin)
        shaped = got.status in (400, 403) and "error" in got.json()
        if not shaped:
            failures.append((kind, method, path, got.status, got.text[:200]))
    assert failures == [], "\n".join(map(str, failures))
    assert _instance(w) == before
    stolen = httpx.get(f"{w.node}/_alias/{w.pub}-stolen", timeout=30)
    assert stolen.status_code == 404
    assert httpx.head(f"{w.node}/_index_template/{w.pub}-tpl", timeout=30).status_code == 404


METADATA_VIEWS = [
    "/_cat/indices",
    "/_cat/indices/*",
    "/_cat/indices?expand_wildcards=all&format=json",
    "/_cat/count",
    "/_cat/shards",
    "/_cat/segments",
    "/_mapping",
    "/_mapping/field/*",
    "/*/_mapping",
    "/_settings",
    "/_settings/index.number_of_shards",
    "/_all/_settings",
    "/_stats",
    "/_cluster/state",
    "/_cluster/state/metadata",
    "/_cluster/state/metadata,routing_table",
    "/_resolve/index/*?expand_wildcards=all",
    "/_alias",
    "/_field_caps?fields=*",
]


def test_metadata_views_hide_the_private_indices(world: World) -> None:
    w = world
    assert any(m in httpx.get(f"{w.node}/_cat/indices", timeout=30).text for m in PRIVATE_MARKERS)  # control
    for path in METADATA_VIEWS:
        got = raw(w.proxy, "GET", path, None, w.admin)
        assert got.status == 200, (path, got.text[:300])
        assert not any(m in got.text for m in PRIVATE_MARKERS), (path, got.text[:300])
        if "_cat/indices" in path or "_mapping" in path or "_settings" in path:
            assert w.pub in got.text, path  # the public indices are still there


# ---- What an administrator legitimately does --------------------------------------------------------


def test_opensearch_py_bulk_updates(world: World) -> None:
    from opensearchpy import OpenSearch, helpers

    w = world
    client = OpenSearch(hosts=[w.proxy], headers=w.admin, timeout=60)
    actions = [
        {"_op_type": "update", "_index": w.pub, "_id": "1", "doc": {"n": 2, "details": {"k": "v"}}},
        {"_op_type": "index", "_index": w.pub, "_id": "2", "details": {"nested": True}},
        {"_op_type": "update", "_index": w.pub, "_id": "2", "doc": {"details": {"nested": False}}},
    ]
    ok, errors = helpers.bulk(client, actions, refresh=True)
    assert ok == 3 and errors == []
    assert client.get(index=w.pub, id="1")["_source"]["details"] == {"k": "v"}
    malformed = raw(w.proxy, "POST", "/_bulk", ndjson({"index": {"_index": w.pub}, "x": 1}, {}), w.admin)
    assert malformed.status == 400, malformed.text  # a malformed bulk is a 400, as on the node


def test_search_pipeline_crud(world: World) -> None:
    w, name = world, f"{world.pub}-pipeline"
    body = {"request_processors": [{"filter_query": {"query": {"term": {"title": "public"}}}}]}
    assert raw(w.proxy, "PUT", f"/_search/pipeline/{name}", body, w.admin).status == 200
    assert raw(w.proxy, "GET", f"/_search/pipeline/{name}", None, w.admin).status == 200
    assert raw(w.proxy, "GET", f"/{w.pub}/_search?search_pipeline={name}", None, w.admin).status == 200
    assert raw(w.proxy, "DELETE", f"/_search/pipeline/{name}", None, w.admin).status == 200


def test_point_in_time_create_and_delete(world: World) -> None:
    w = world
    created = raw(w.proxy, "POST", f"/{w.pub}/_search/point_in_time?keep_alive=1m", None, w.admin)
    assert created.status == 200, created.text
    pit = created.json()["pit_id"]
    segments = raw(w.proxy, "GET", "/_cat/pit_segments", {"pit_id": [pit]}, w.admin)
    assert segments.status == 200, segments.text
    deleted = raw(w.proxy, "DELETE", "/_search/point_in_time", {"pit_id": [pit]}, w.admin)
    assert deleted.status == 200 and deleted.json()["pits"][0]["successful"] is True, deleted.text


def test_rethrottle_of_running_tasks(world: World) -> None:
    w, dest = world, f"{world.pub}-copy"
    for n in range(3, 8):
        raw(w.node, "PUT", f"/{w.pub}/_doc/{n}?refresh=true", {"title": "t", "n": n})
    started = raw(
        w.proxy,
        "POST",
        "/_reindex?wait_for_completion=false&requests_per_second=0.2",
        {"source": {"index": w.pub, "size": 1}, "dest": {"index": dest}},
        w.admin,
    )
    assert started.status == 200, started.text
    task = started.json()["task"]
    for kind in ("_reindex", "_update_by_query", "_delete_by_query"):
        got = raw(w.proxy, "POST", f"/{kind}/{task}/_rethrottle?requests_per_second=-1", None, w.admin)
        # Forwarded: the node answers (the task is a reindex, so the other two are the node's own refusal).
        assert "security_exception" not in got.text, (kind, got.text)
    assert (
        raw(w.proxy, "POST", f"/_reindex/{task}/_rethrottle?requests_per_second=-1", None, w.admin).status
        == 200
    )
    deadline = time.monotonic() + 60
    while raw(w.node, "GET", f"/_tasks/{task}", None).json().get("completed") is not True:
        assert time.monotonic() < deadline
        time.sleep(0.5)


def test_alias_management(world: World) -> None:
    w, name = world, f"{world.pub}-named"
    assert raw(w.proxy, "POST", f"/_aliases/{name}", {"index": w.pub}, w.admin).status == 200
    assert raw(w.proxy, "GET", f"/{name}/_doc/1", None, w.admin).status == 200
    assert raw(w.proxy, "DELETE", f"/{w.pub}/_alias/*", None, w.admin).status == 200
    actions = {
        "actions": [{"add": {"index": w.pub, "alias": name}}, {"remove": {"index": w.pub, "alias": name}}]
    }
    assert raw(w.proxy, "POST", "/_aliases", actions, w.admin).status == 200
    assert raw(w.proxy, "PUT", f"/{w.pub}/_alias/{name}", None, w.admin).status == 200


def test_canonical_path_is_what_is_forwarded(world: World) -> None:
    w = world
    # An id with an encoded slash and a plus stays one segment, as on the node; a trailing slash is dropped.
    assert raw(w.proxy, "PUT", f"/{w.pub}/_doc/a%2Fb+c?refresh=true", {"n": 1}, w.admin).status == 201
    assert raw(w.node, "GET", f"/{w.pub}/_doc/a%2Fb+c", None).json()["found"] is True
    assert raw(w.proxy, "GET", f"/{w.pub}/_doc/a%2Fb+c/", None, w.admin).json()["_id"] == "a/b+c"
    assert raw(w.proxy, "GET", f"/%{w.pub.encode().hex()[:2]}{w.pub[1:]}/_doc/1", None, w.admin).status == 200


def test_cat_aliases_leaves_out_memproxy_s_own(world: World) -> None:
    """An alias of a private index (memproxy makes them when it migrates a layout) is not listed; naming it
    is refused like naming the index."""
    w, private = world, f"memproxy-jobs-pp-{uuid.uuid4().hex[:8]}"
    assert raw(w.node, "PUT", f"/{private}", {"aliases": {f"{private}-alias": {}}}).status == 200
    public = f"{w.pub}-cat-alias"
    assert raw(w.node, "PUT", f"/{w.pub}/_alias/{public}", None).status == 200
    try:
        assert f"{private}-alias" in raw(w.node, "GET", "/_cat/aliases", None).text  # the node lists it
        for path in ("/_cat/aliases", "/_cat/aliases?v", "/_cat/aliases/*", "/_cat/aliases/memproxy-*"):
            got = raw(w.proxy, "GET", path, None, w.admin)
            assert got.status == 200 and private not in got.text, (path, got.text)
        assert public in raw(w.proxy, "GET", "/_cat/aliases", None, w.admin).text  # a public one is
        named = raw(w.proxy, "GET", f"/_cat/aliases/{private}-alias", None, w.admin)
        assert named.status == 403 and "security_exception" in named.text, named.text
    finally:
        raw(w.node, "DELETE", f"/{private}", None)
        raw(w.node, "DELETE", f"/{w.pub}/_alias/{public}", None)


def test_task_descriptions_never_pass(world: World) -> None:
    """A task's description is the request it runs, memproxy's own searches of its private indices among
    them (an API key's hash, a tenant's filter): no listing shows one, and a task's own answer loses it."""
    w, dest = world, f"{world.pub}-tasks"
    for path in (
        "/_tasks?detailed=true",
        "/_tasks?detailed",
        "/_cat/tasks?detailed=true",
        "/_cat/tasks?detailed",
    ):
        got = raw(w.proxy, "GET", path, None, w.admin)
        assert got.status == 403 and "security_exception" in got.text, (path, got.text)
    assert raw(w.proxy, "GET", "/_tasks?detailed=false", None, w.admin).status == 200
    assert raw(w.proxy, "GET", "/_cat/tasks?v", None, w.admin).status == 200
    assert raw(w.proxy, "GET", "/_tasks?format=yaml", None, w.admin).status == 400
    started = raw(
        w.node,
        "POST",
        "/_reindex?wait_for_completion=false&requests_per_second=0.5",
        {"source": {"index": w.pub, "size": 1}, "dest": {"index": dest}},
    )
    task = started.json()["task"]
    try:
        direct = raw(w.node, "GET", f"/_tasks/{task}", None).json()
        assert "description" in direct["task"]  # what the node itself answers
        via = raw(w.proxy, "GET", f"/_tasks/{task}", None, {**w.admin, "Accept-Encoding": "gzip"})
        assert via.status == 200, via.text
        answer = via.json()
        assert "description" not in answer["task"] and answer["task"]["action"] == direct["task"]["action"]
        assert answer["task"]["id"] == direct["task"]["id"]
    finally:
        raw(w.node, "POST", f"/_reindex/{task}/_rethrottle?requests_per_second=-1", None)
        deadline = time.monotonic() + 60
        while raw(w.node, "GET", f"/_tasks/{task}", None).json().get("completed") is not True:
            assert time.monotonic() < deadline
            time.sleep(0.5)


def test_node_stats_by_index_are_refused(world: World) -> None:
    w = world
    assert KEYS in raw(w.node, "GET", "/_nodes/stats/indices?level=indices", None).text  # the node lists it
    for path in (
        "/_nodes/stats?level=indices",
        "/_nodes/stats/indices?level=shards",
        "/_nodes?level=indices",
    ):
        got = raw(w.proxy, "GET", path, None, w.admin)
        assert got.status == 403 and "security_exception" in got.text, (path, got.text)
    by_node = raw(w.proxy, "GET", "/_nodes/stats/indices?level=node", None, w.admin)
    assert by_node.status == 200 and KEYS not in by_node.text
    assert raw(w.proxy, "GET", "/_nodes/stats/jvm", None, w.admin).status == 200
