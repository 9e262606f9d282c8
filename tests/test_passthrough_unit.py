"""The pass-through policy's pure parts, without a node: the canonical path, the endpoint allowlist, the
body parsers and the lookups of forwarded bodies (``lookup_indices``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.api.passthrough import PUBLIC, _could_be_private, _filtered, _globs_overlap
from proxy.api.passthrough_bodies import lookup_indices, names_in
from proxy.api.passthrough_routes import BULK, MSEARCH, canonical_segments, encode_path, match
from proxy.errors import BadRequest


@pytest.mark.parametrize(
    "path",
    ["/a/%2e%2e/b", "/a/%2E%2E/b", "/a/.%2e/b", "/a/%2e./b", "/a/./b", "/a/../b", "//a", "/a//b", "/a/%2e"],
)
def test_dot_and_empty_segments_are_refused(path: str) -> None:
    with pytest.raises(BadRequest):
        canonical_segments(path)


def test_segments_decode_one_by_one_and_encode_back() -> None:
    assert canonical_segments("/%6dovies/_doc/a%2Fb+c/") == ("movies", "_doc", "a/b+c")
    assert encode_path(("movies", "_doc", "a/b c%")) == "/movies/_doc/a%2Fb%20c%25"


@pytest.mark.parametrize(
    ("method", "path", "pattern"),
    [
        ("DELETE", "/_search/pipeline/p", "_search/pipeline/{*}"),
        ("POST", "/m/_search/point_in_time", "{index}/_search/point_in_time"),
        ("POST", "/_update_by_query/n:1/_rethrottle", "_update_by_query/{*}/_rethrottle"),
        ("POST", "/_aliases/jeux", "_aliases/{alias}"),
        ("POST", "/m/_clone/n", "{index}/_clone/{new}"),
        ("GET", "/_all/_search", "{index}/_search"),
        ("PUT", "/_bulk", "_bulk"),
        ("GET", "/_plugins/_security/authinfo", "_plugins/_security/{**}"),
        ("GET", "/_plugins/_knn/stats", "_plugins/_knn/stats"),
        ("GET", "/_plugins/_knn/warmup/m", "_plugins/_knn/warmup/{index}"),
    ],
)
def test_the_allowlist_routes_like_the_node(method: str, path: str, pattern: str) -> None:
    found = match(method, canonical_segments(path))
    assert found is not None and "/".join(found.endpoint.pattern) == pattern


def test_unknown_and_refused_endpoints() -> None:
    assert match("GET", canonical_segments("/_made_up")) is None
    assert match("GET", canonical_segments("/_plugins/_securityx/authinfo")) is None
    assert match("POST", canonical_segments("/_plugins/_knn/models/_train")) is None
    assert match("PATCH", canonical_segments("/m/_doc/1")) is None
    for method, path in [
        ("GET", "/_search"),
        ("PUT", "/_settings"),
        ("DELETE", "/_search/point_in_time/_all"),
    ]:
        found = match(method, canonical_segments(path))
        assert found is not None and found.endpoint.refused


def test_private_names_by_pattern_and_date_math() -> None:
    assert _globs_overlap("memproxy*", "memproxy-goodmem-*") and _globs_overlap("*", "x")
    assert not _globs_overlap("logs-*", "memproxy-goodmem-*")
    for name in ("memproxy-goodmem-x", "<memproxy-goodmem-{now/d}>", "memproxy-goodmem-user?", "*"):
        assert _could_be_private(name), name
    assert not _could_be_private("movies") and not _could_be_private("<logs-{now/d}>")
    assert _filtered("_all") == PUBLIC and _filtered("m*").startswith("m*,-memproxy-goodmem-*")
    assert _filtered("movies") == "movies"


def _ndjson(*lines: Any) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def test_bulk_source_lines_are_read_by_position() -> None:
    body = _ndjson(
        {"update": {"_index": "books", "_id": "1"}},
        {"doc": {"pages": 376}},
        {"index": {"_id": "2"}},
        {"details": {"k": "v"}},
        {"delete": {"_index": "films", "_id": "3"}},
    )
    assert names_in(BULK, body, "movies").indices == ["books", "movies", "films"]


@pytest.mark.parametrize(
    "body",
    [
        _ndjson({"index": {"_index": "a"}, "x": 1}, {}),
        _ndjson({"delete": {"_index": "a", "extra": 1}}),
        _ndjson({"index": {}}) + b"\n" + _ndjson({"delete": {"_index": "b"}}),
        b'{"delete":{"_index":"a","_index":"b"}}\n',
        b'{"delete":{/* c */"_index":"a"}}\n',
    ],
)
def test_malformed_bulk_is_a_400(body: bytes) -> None:
    with pytest.raises(BadRequest):
        names_in(BULK, body, None)


def test_msearch_reads_index_and_indices() -> None:
    body = _ndjson({"index": "a", "indices": ["b"]}, {}, {}, {})
    assert names_in(MSEARCH, body, "d").indices == ["a", "b", "d"]
    assert names_in(MSEARCH, _ndjson({}, {}), None).indices == ["_all"]


@pytest.mark.parametrize(
    "body",
    [
        {"query": {"terms": {"f": {"index": "i", "id": "1", "path": "p"}}}},
        {"query": {"bool": {"filter": [{"geo_shape": {"l": {"indexed_shape": {"index": "i", "id": "1"}}}}]}}},
        {"query": {"more_like_this": {"fields": ["t"], "like": [{"_index": "i", "_id": "1"}]}}},
        {"query": {"more_like_this": {"fields": ["t"], "unlike": {"_index": "i", "_id": "1"}}}},
        {"query": {"percolate": {"field": "q", "index": "i", "id": "1"}}},
        {"source": json.dumps({"query": {"terms": {"f": {"index": "i", "id": "1"}}}})},
    ],
)
def test_the_indices_a_forwarded_lookup_reads_are_named_for_the_check(body: Any) -> None:
    assert lookup_indices(body) == ["i"]


@pytest.mark.parametrize(
    "body",
    [
        {"source": '{"query": {"percolate": {{#toJson}}p{{/toJson}} }}'},
        {"source": '{"query": {"terms": {"f": {"index": "{{i}}", "id": "1"}}}} {{/x}}'},
        {"query": {"wrapper": {"query": "eyJtYXRjaF9hbGwiOnt9fQ=="}}},
    ],
)
def test_lookups_that_cannot_be_read_are_refused(body: Any) -> None:
    with pytest.raises(BadRequest):
        lookup_indices(body)


def test_forwarded_bodies_keep_ordinary_queries() -> None:
    for body in (
        {"query": {"terms": {"genre": ["a", "b"]}}, "aggs": {"g": {"terms": {"field": "genre"}}}},
        {"query": {"more_like_this": {"fields": ["t"], "like": "free text"}}},
        # a lookup that names no index reads the searched index, which the path check already allowed
        {"query": {"more_like_this": {"fields": ["t"], "unlike": {"_id": "1"}}}},
        {"source": '{"query": {"match": {"t": "{{q}}"}}}', "params": {"q": "x"}},
    ):
        assert lookup_indices(body) == []
