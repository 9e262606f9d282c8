"""The ``memproxy`` CLI (proxy/cli, docs/cli.md): unit tests of its parsing, and the real command run as a
subprocess (``python -m proxy <command>``) against the session's memproxy and OpenSearch node.

The done-when of issue 18 item 3: ``memproxy ingest`` loads 10 000 JSONL lines into a space (counted through
the API, timed), and export → import into a fresh container round-trips exactly.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cli import COMMANDS, parser
from proxy.cli.client import api_message
from proxy.cli.ingest import (
    WORKING_NOTE,
    Item,
    Source,
    derive_id,
    parse_jsonl_line,
    parse_pairs,
    read_entries,
)
from tests.conftest import free_port
from tests.opensearch_memory_helpers import EMBEDDING, new_prefix

REPO = Path(__file__).resolve().parent.parent
C = "/_plugins/_ml/memory_containers"


# --- unit tests (no node) ------------------------------------------------------------------------


def test_derived_ids_are_stable_and_distinct() -> None:
    one = derive_id("space-a", "notes/a.jsonl", 3)
    assert one == derive_id("space-a", "notes/a.jsonl", 3)
    assert str(uuid.UUID(one)) == one and uuid.UUID(one).version == 5
    others = {
        derive_id("space-b", "notes/a.jsonl", 3),
        derive_id("space-a", "notes/b.jsonl", 3),
        derive_id("space-a", "notes/a.jsonl", 4),
        derive_id("space-a", "notes/a.jsonl", 0),
    }
    assert one not in others and len(others) == 4


def _line(raw: str, defaults: dict[str, Any] | None = None) -> Any:
    return parse_jsonl_line(
        raw, source=Source(Path("f.jsonl"), "f.jsonl"), line=7, target="T", defaults=defaults or {}
    )


def test_jsonl_lines_are_validated() -> None:
    item = _line('{"text": "hello", "metadata": {"a": 1}}', {"src": "cli", "a": 0})
    assert (item.text, item.metadata, item.memory_id) == (
        "hello",
        {"src": "cli", "a": 1},
        derive_id("T", "f.jsonl", 7),
    )
    given = str(uuid.uuid4())
    assert _line(json.dumps({"content": "x", "memoryId": given})).memory_id == given
    bad = {
        "{not json": "not valid JSON",
        "[1]": "not a JSON object",
        '{"content": "a", "text": "b"}': "exactly one of",
        "{}": "exactly one of",
        '{"content": 5}': "non-empty string",
        '{"content": "  "}': "non-empty string",
        '{"content": "a", "metadata": []}': "metadata must be a JSON object",
        '{"content": "a", "memoryId": "nope"}': "memoryId must be a UUID",
        '{"content": "a", "colour": "red"}': "unknown field(s) colour",
    }
    for raw, reason in bad.items():
        with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            _line(raw)


def test_a_file_reads_as_items_and_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"content": "one"}\n\n{"content": 2}\n{"text": "three"}\n')
    entries = list(read_entries(Source(path, "m.jsonl"), "T", {}))
    assert [type(e).__name__ for e in entries] == ["Item", "LineError", "Item"]
    assert str(entries[1]) == f"{path}:3: the text must be a non-empty string"
    assert [getattr(e, "line", None) for e in entries] == [1, 3, 4]
    note = tmp_path / "n.md"
    note.write_text("# A note\n\nbody")
    (item,) = read_entries(Source(note, "n.md"), "T", {"k": "v"})
    assert isinstance(item, Item)
    assert (item.line, item.text, item.metadata) == (0, "# A note\n\nbody", {"k": "v"})


def test_argument_parsing() -> None:
    p = parser()
    args = p.parse_args(["ingest", "a.jsonl", "b", "--space", "S", "--metadata", "k=v", "--no-resume"])
    assert (args.paths, args.space, args.container, args.metadata, args.resume) == (
        ["a.jsonl", "b"],
        "S",
        None,
        ["k=v"],
        False,
    )
    assert p.parse_args(["search", "q", "--space", "A", "--space", "B"]).space == ["A", "B"]
    for wrong in (
        ["ingest", "a.jsonl"],  # no target
        ["ingest", "a.jsonl", "--space", "S", "--container", "C"],  # two targets
        ["search", "q"],
        ["export"],
        ["import", "f.jsonl"],
        ["search", "q", "--space", "S", "--k", "ten"],
    ):
        with pytest.raises(SystemExit) as exc:
            p.parse_args(wrong)
        assert exc.value.code == 2, wrong
    assert parse_pairs(["a=1", "b=x=y"], "--metadata") == {"a": "1", "b": "x=y"}


def test_api_messages_are_read_from_every_envelope() -> None:
    assert api_message({"error": "No API key provided.", "status": 401}, "?") == "No API key provided."
    assert api_message({"error": {"reason": "Memory container not found"}, "status": 404}, "?") == (
        "Memory container not found"
    )
    assert api_message({"error": {"message": "bad", "type": "x"}}, "?") == "bad"
    assert api_message("not json", "fallback") == "fallback"


def _cli(*args: str, url: str, key: str | None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_")}
    env["MEMPROXY_URL"] = url
    if key is not None:
        env["MEMPROXY_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_command_explains_itself() -> None:
    for command in sorted(COMMANDS):
        done = _cli(command, "--help", url="http://127.0.0.1:1", key=None)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: memproxy " + command) and "example" in done.stdout
        assert "exit codes" in done.stdout
    usage = _cli("ingest", url="http://127.0.0.1:1", key=None)
    assert usage.returncode == 2 and "PATH" in usage.stderr
    # ``memproxy --help`` names the server and every command with its one line, not the server's flags;
    # those are ``memproxy serve --help``, and anything else is still the server's command line.
    top = _cli("--help", url="http://127.0.0.1:1", key=None)
    listed = {line.split()[0] for line in top.stdout.splitlines() if line.startswith("  ") and line.split()}
    assert top.returncode == 0 and {"serve", "migrate-layout", "root-key", *COMMANDS} <= listed, top.stdout
    assert "--opensearch-url" not in top.stdout
    done = _cli("serve", "--help", url="http://127.0.0.1:1", key=None)
    assert done.returncode == 0 and "--opensearch-url" in done.stdout


def test_root_key_prints_a_new_working_key_of_the_root_user(
    proxy_url: str, opensearch_url: str, admin_key: str
) -> None:
    """The way back to a lost root key (the README tour's init answers it once per cluster): the command
    reaches the cluster with the server's flags and prints a key that authenticates as the root user."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "root-key", "--opensearch-url", opensearch_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (key,) = done.stdout.split()
    assert key.startswith("gm_") and key != admin_key
    me = httpx.get(f"{proxy_url}/v1/users/me", headers={"x-api-key": key}, timeout=30)
    assert me.status_code == 200, me.text
    root = httpx.get(f"{proxy_url}/v1/users/me", headers={"x-api-key": admin_key}, timeout=30).json()
    assert me.json()["userId"] == root["userId"] and me.json()["email"] == "root@goodmem.local"


def test_cannot_connect_is_exit_3() -> None:
    done = _cli("inspect", url=f"http://127.0.0.1:{free_port()}", key="k")
    assert done.returncode == 3
    assert "cannot connect to memproxy" in done.stderr


# --- against memproxy --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http(proxy_url: str, admin_headers: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy_url, headers=admin_headers, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def embedder_id(http: httpx.Client) -> str:
    return str(http.get("/v1/embedders").json()["embedders"][0]["embedderId"])


def _new_space(http: httpx.Client, embedder_id: str, label: str) -> str:
    res = http.post(
        "/v1/spaces",
        json={"name": f"cli-{label}-{uuid.uuid4().hex[:8]}", "spaceEmbedders": [{"embedderId": embedder_id}]},
    )
    assert res.status_code == 201, res.text
    return str(res.json()["spaceId"])


def _long_term_count(http: httpx.Client, container_id: str) -> int:
    res = http.post(
        f"{C}/{container_id}/memories/long-term/_search",
        json={"size": 0, "track_total_hits": True, "query": {"match_all": {}}},
    )
    assert res.status_code == 200, res.text
    return int(res.json()["hits"]["total"]["value"])


@pytest.fixture
def space(http: httpx.Client, embedder_id: str) -> Iterator[str]:
    space_id = _new_space(http, embedder_id, "ingest")
    yield space_id
    http.delete(f"/v1/spaces/{space_id}")


def test_ingest_ten_thousand_lines(
    space: str, proxy_url: str, admin_key: str, http: httpx.Client, tmp_path: Path
) -> None:
    rng = random.Random(18)
    people = (
        "the baker,my sister,an old sailor,the mayor,a young chemist,our neighbour,the twins,the librarian"
    )
    verbs = "collects,repairs,writes about,photographs,sells,studies,dreams about,cooks,counts,plants"
    things = "antique clocks,mountain goats,red bicycles,tax forms,wild mushrooms,jazz records,lemon trees"
    places = "in Lisbon,on Tuesdays,after midnight,near the harbour,at the market,in the attic,every summer"
    lines = [
        json.dumps(
            {
                "content": " ".join(rng.choice(words.split(",")) for words in (people, verbs, things, places))
                + f" (note {i}).",
                "metadata": {"n": i},
            }
        )
        for i in range(10_000)
    ]
    data = tmp_path / "big.jsonl"
    data.write_text("\n".join(lines) + "\n")

    started = time.monotonic()
    done = _cli("ingest", str(data), "--space", space, "--batch-size", "250", url=proxy_url, key=admin_key)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "created 10000, skipped 0, failed 0"
    print(f"\ningest of 10000 JSONL lines: {elapsed:.1f} s ({10_000 / elapsed:.0f} memories/s)")
    assert _long_term_count(http, space) == 10_000
    assert (tmp_path / f".memproxy-ingest-space-{space}.json").is_file()

    again = _cli("ingest", str(data), "--space", space, url=proxy_url, key=admin_key)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip().splitlines()[-1] == "created 0, skipped 10000, failed 0"
    assert _long_term_count(http, space) == 10_000

    # The query is one stored text, so the expected top hit is certain: this checks the CLI's retrieve and its
    # mapping of items to memories; how well approximate k-NN finds paraphrases is docs/benchmarks.md's.
    wanted = json.loads(lines[4242])["content"]
    found = _cli("search", wanted, "--space", space, "--k", "3", "--json", url=proxy_url, key=admin_key)
    assert found.returncode == 0, found.stderr
    hits = [json.loads(line) for line in found.stdout.splitlines()]
    assert len(hits) == 3 and hits[0]["text"] == wanted and abs(hits[0]["score"]) > 0.99
    assert hits[0]["memoryId"] == derive_id(space, "big.jsonl", 4243)

    table = _cli("search", wanted, "--space", space, "--k", "2", url=proxy_url, key=admin_key)
    assert table.returncode == 0 and wanted in table.stdout.splitlines()[1]

    shown = _cli("inspect", "--space", space, url=proxy_url, key=admin_key)
    assert shown.returncode == 0, shown.stderr
    assert (
        space in shown.stdout
        and "(10000 documents)" in shown.stdout
        and embedder_id_of(http, space) in shown.stdout
    )
    listed = _cli("inspect", url=proxy_url, key=admin_key)
    assert listed.returncode == 0 and any(
        space in line and line.startswith("space") for line in listed.stdout.splitlines()
    )


def embedder_id_of(http: httpx.Client, space: str) -> str:
    return str(http.get(f"/v1/spaces/{space}").json()["spaceEmbedders"][0]["embedderId"])


def test_a_malformed_line_keeps_its_batch_out(
    space: str, proxy_url: str, admin_key: str, http: httpx.Client, tmp_path: Path
) -> None:
    rows = [json.dumps({"content": f"fact number {i} about owls"}) for i in range(1, 11)]
    rows[6] = '{"content": 7}'  # line 7, in the second batch of five
    data = tmp_path / "bad.jsonl"
    data.write_text("\n".join(rows) + "\n")
    done = _cli("ingest", str(data), "--space", space, "--batch-size", "5", url=proxy_url, key=admin_key)
    assert done.returncode == 1
    assert f"{data}:7: the text must be a non-empty string" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "created 5, skipped 0, failed 5"
    assert _long_term_count(http, space) == 5
    assert http.get(f"/v1/memories/{derive_id(space, 'bad.jsonl', 6)}").status_code == 404
    assert http.get(f"/v1/memories/{derive_id(space, 'bad.jsonl', 5)}").status_code == 200

    rows[6] = json.dumps({"content": "fact number 7 about owls"})
    data.write_text("\n".join(rows) + "\n")
    fixed = _cli("ingest", str(data), "--space", space, "--batch-size", "5", url=proxy_url, key=admin_key)
    assert fixed.returncode == 0, fixed.stderr
    # The file changed, so it is read again: the first batch is already stored (409 → skipped).
    assert fixed.stdout.strip().splitlines()[-1] == "created 5, skipped 5, failed 0"
    assert _long_term_count(http, space) == 10


def test_a_wrong_key_is_exit_3_with_the_api_message(space: str, proxy_url: str) -> None:
    done = _cli("search", "owls", "--space", space, url=proxy_url, key="gm_not-a-real-key")
    assert done.returncode == 3
    assert "Invalid or expired API key." in done.stderr
    missing = _cli("export", "--space", space, url=proxy_url, key=None)
    assert missing.returncode == 3 and "Missing authentication information" in missing.stderr


def test_ingest_into_a_container_is_idempotent(
    proxy_url: str, admin_key: str, http: httpx.Client, tmp_path: Path
) -> None:
    res = http.post(
        f"{C}/_create", json={"name": "cli-c", "configuration": {"index_prefix": new_prefix("cli")}}
    )
    assert res.status_code == 200, res.text
    cid = res.json()["memory_container_id"]
    try:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "a.md").write_text("# Owls\nOwls hunt at night.")
        (tmp_path / "docs" / "b.jsonl").write_text('{"text": "one"}\n{"text": "two", "metadata": {"k": 1}}\n')
        args = ("ingest", str(tmp_path / "docs"), "--container", cid, "--metadata", "src=cli", "--no-resume")
        first = _cli(*args, url=proxy_url, key=admin_key)
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip().splitlines()[-1] == "created 3, skipped 0, failed 0"
        # No embedding model: working memory is all this container keeps, so there is nothing to point at.
        assert "note:" not in first.stderr
        second = _cli(*args, url=proxy_url, key=admin_key)
        assert second.stdout.strip().splitlines()[-1] == "created 0, skipped 3, failed 0"
        hits = http.post(
            f"{C}/{cid}/memories/working/_search", json={"size": 10, "query": {"match_all": {}}}
        ).json()
        metas = sorted(h["_source"]["metadata"]["memproxy_ingest_id"] for h in hits["hits"]["hits"])
        assert metas == sorted(
            derive_id(cid, rel, n) for rel, n in (("a.md", 0), ("b.jsonl", 1), ("b.jsonl", 2))
        )
        assert all(h["_source"]["metadata"]["src"] == "cli" for h in hits["hits"]["hits"])
    finally:
        http.delete(f"{C}/{cid}", params={"delete_all_memories": "true"})


def test_ingest_into_a_searchable_container_says_how_to_make_it_searchable(
    proxy_url: str, admin_key: str, http: httpx.Client, tmp_path: Path
) -> None:
    """The README tour's trap (issue 29): ``--container`` writes working memories, which the container's
    semantic search never finds; the command says so, and ``--space`` with the same id is what works."""
    res = http.post(
        f"{C}/_create",
        json={"name": "cli-s", "configuration": {**EMBEDDING, "index_prefix": new_prefix("cli")}},
    )
    assert res.status_code == 200, res.text
    cid = res.json()["memory_container_id"]
    try:
        (tmp_path / "owls.txt").write_text("Owls hunt at night.")
        working = _cli("ingest", str(tmp_path / "owls.txt"), "--container", cid, url=proxy_url, key=admin_key)
        assert working.returncode == 0, working.stderr
        assert WORKING_NOTE.format(id=cid) in working.stderr
        search = ("search", "when do owls hunt?", "--container", cid, "--json")
        assert _cli(*search, url=proxy_url, key=admin_key).stdout == ""

        spaced = _cli("ingest", str(tmp_path / "owls.txt"), "--space", cid, url=proxy_url, key=admin_key)
        assert spaced.returncode == 0, spaced.stderr
        assert "note:" not in spaced.stderr
        found = _cli(*search, url=proxy_url, key=admin_key)
        assert [json.loads(line)["text"] for line in found.stdout.splitlines()] == ["Owls hunt at night."]
    finally:
        http.delete(f"{C}/{cid}", params={"delete_all_memories": "true"})


def _normalised(path: Path, container_id: str, new_id: str) -> list[Any]:
    return [json.loads(line.replace(container_id, new_id)) for line in path.read_text().splitlines()]


def test_export_then_import_round_trips_exactly(
    proxy_url: str, admin_key: str, http: httpx.Client, embedder_id: str, tmp_path: Path
) -> None:
    space = _new_space(http, embedder_id, "export")
    memories = [
        {"memoryId": str(uuid.uuid4()), "spaceId": space, "originalContent": text, "metadata": meta}
        for text, meta in (
            ("Ada keeps bees on the roof of the library.", {"topic": "bees", "n": 1}),
            ("The ferry leaves at seven every morning. " * 40, {"topic": "travel", "tags": ["a", "b"]}),
            ("Grandmother's soup needs a pinch of nutmeg.", {}),
        )
    ]
    res = http.post("/v1/memories:batchCreate", json={"requests": memories})
    assert res.status_code == 200, res.text
    # A long-term memory written through the OpenSearch API (no GoodMem record) travels too.
    added = http.post(
        f"{C}/{space}/memories/long-term/_memproxy_add",
        json={"memory": "Owls nest in the old barn.", "tags": {"t": "x"}},
    )
    assert added.status_code == 200, added.text
    query = ["search", "where do the bees live?", "--space"]
    before = _cli(*query, space, "--json", url=proxy_url, key=admin_key)
    assert before.returncode == 0, before.stderr
    top = json.loads(before.stdout.splitlines()[0])

    first = tmp_path / "first.jsonl"
    done = _cli("export", "--space", space, "-o", str(first), url=proxy_url, key=admin_key)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in first.read_text().splitlines()]
    assert lines[0]["format"] == "memproxy-container-export" and lines[0]["memory_container_id"] == space
    kinds = [line["kind"] for line in lines[1:]]
    assert kinds.count("goodmem-record") == 3 and kinds.count("long-term") >= 5  # the ferry text is chunked
    assert all(
        len(line["source"]["memory_embedding"]) == 384 for line in lines[1:] if line["kind"] == "long-term"
    )

    # Ids are kept, so the original goes first (a restore), then the export comes back under a new id.
    assert http.delete(f"/v1/spaces/{space}").status_code == 204
    restored = str(uuid.uuid4())
    imported = _cli("import", str(first), "--container", restored, "--create", url=proxy_url, key=admin_key)
    try:
        assert imported.returncode == 0, imported.stderr
        assert f"imported {len(lines) - 1} documents into {restored} (created)" in imported.stdout
        second = tmp_path / "second.jsonl"
        again = _cli("export", "--container", restored, "-o", str(second), url=proxy_url, key=admin_key)
        assert again.returncode == 0, again.stderr
        assert _normalised(second, restored, space) == lines
        after = _cli(*query, restored, "--json", url=proxy_url, key=admin_key)
        assert after.returncode == 0, after.stderr
        assert json.loads(after.stdout.splitlines()[0]) == top
        # The restored space is a GoodMem space like the original: its memories read back with content.
        got = http.get(f"/v1/memories/{memories[0]['memoryId']}", params={"includeContent": "true"})
        assert got.status_code == 200 and got.json()["spaceId"] == restored

        # A second import of the same file into the same container: every id exists, nothing is written.
        twice = _cli("import", str(first), "--container", restored, url=proxy_url, key=admin_key)
        assert twice.returncode == 1 and "exists already" in twice.stderr
        assert _long_term_count(http, restored) == kinds.count("long-term")
    finally:
        http.delete(f"/v1/spaces/{restored}")


def test_a_container_searched_inspected_and_refused_bad_import_lines(
    proxy_url: str, admin_key: str, http: httpx.Client, tmp_path: Path
) -> None:
    res = http.post(
        f"{C}/_create",
        json={"name": "cli-src", "configuration": {**EMBEDDING, "index_prefix": new_prefix("cli")}},
    )
    cid = res.json()["memory_container_id"]
    target = str(uuid.uuid4())
    try:
        for text, user in (("alpha memory", "u1"), ("beta memory", "u2"), ("gamma memory", "u1")):
            added = http.post(
                f"{C}/{cid}/memories/long-term/_memproxy_add",
                json={"memory": text, "namespace": {"user_id": user}},
            )
            assert added.status_code == 200, added.text
        # The container's own search and view, on the way.
        found = _cli(
            "search", "beta memory", "--container", cid, "--k", "1", "--json", url=proxy_url, key=admin_key
        )
        assert found.returncode == 0, found.stderr
        assert [json.loads(line)["text"] for line in found.stdout.splitlines()] == ["beta memory"]
        scoped = _cli(
            "search",
            "beta memory",
            "--container",
            cid,
            "--namespace",
            "user_id=u1",
            url=proxy_url,
            key=admin_key,
        )
        assert (
            scoped.returncode == 0 and "beta memory" not in scoped.stdout and "alpha memory" in scoped.stdout
        )
        usage = _cli("search", "x", "--space", cid, "--namespace", "a=b", url=proxy_url, key=admin_key)
        assert usage.returncode == 2 and "--namespace applies to a container" in usage.stderr
        shown = _cli("inspect", "--container", cid, url=proxy_url, key=admin_key)
        assert shown.returncode == 0, shown.stderr
        assert (
            "memory-long-term  (3 documents)" in shown.stdout
            and "memory-working  (0 documents)" in shown.stdout
        )
        export = tmp_path / "src.jsonl"
        assert (
            _cli("export", "--container", cid, "-o", str(export), url=proxy_url, key=admin_key).returncode
            == 0
        )
        rows = export.read_text().splitlines()
        assert len(rows) == 4
        broken = json.loads(rows[2])
        broken["source"]["memory_embedding"] = broken["source"]["memory_embedding"][:10]
        rows[2] = json.dumps(broken)
        rows[3] = "{oops"
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join(rows) + "\n")
        done = _cli("import", str(bad), "--container", target, "--create", url=proxy_url, key=admin_key)
        assert done.returncode == 1
        assert "line 3: memory_embedding has 10 dimensions, the container 384" in done.stderr
        assert "line 4: not valid JSON" in done.stderr
        assert _long_term_count(http, target) == 0  # the container was created, nothing of the batch written
        wrong_dim = tmp_path / "dim.jsonl"
        header = json.loads(rows[0])
        header["container"]["configuration"]["embedding_dimension"] = 768
        wrong_dim.write_text(json.dumps(header) + "\n")
        refused = _cli("import", str(wrong_dim), "--container", target, url=proxy_url, key=admin_key)
        assert refused.returncode == 1 and "embedding dimension 768, the container has 384" in refused.stderr
    finally:
        http.delete(f"{C}/{target}")  # first: the source's delete_all_memories refuses a shared prefix
        http.delete(f"{C}/{cid}", params={"delete_all_memories": "true"})


def test_import_lines_are_checked_against_the_target() -> None:
    """The server side of import (proxy.core.transfer): each line's checks, and the id rewrite."""
    from proxy.core.container_record import Container
    from proxy.core.transfer import ImportTarget
    from proxy.errors import BadRequest

    container = Container.from_source(
        "new-id", {"name": "n", "configuration": {**EMBEDDING, "index_prefix": "p", "disable_session": True}}
    )
    target = ImportTarget(container, {"memory_embedding": 3})
    doc = target.document(
        2,
        {
            "kind": "long-term",
            "id": "d1",
            "source": {"memory_container_id": "old", "memory_embedding": [1, 0, 0]},
        },
    )
    assert (doc.index, doc.id, doc.source["memory_container_id"]) == (
        ".plugins-ml-am-p-memory-long-term",
        "d1",
        "new-id",
    )
    record = target.document(3, {"kind": "goodmem-record", "id": "m1", "source": {"space_id": "old"}})
    assert (record.index, record.source["space_id"]) == ("memproxy-goodmem-memories", "new-id")
    bad = {
        "line 4: not valid JSON: x": BadRequest("not valid JSON: x"),
        "line 4: not a JSON object": [1],
        "line 4: kind must be one of": {"kind": "vectors", "id": "a", "source": {}},
        "line 4: id must be a non-empty string": {"kind": "working", "id": "", "source": {}},
        "line 4: source must be a JSON object": {"kind": "working", "id": "a", "source": []},
        "line 4: the container keeps no sessions memories": {"kind": "sessions", "id": "a", "source": {}},
        "line 4: memory_embedding has 2 dimensions, the container 3": {
            "kind": "long-term",
            "id": "a",
            "source": {"memory_embedding": [1, 2]},
        },
        "line 4: memory_embedding must be an array of numbers": {
            "kind": "long-term",
            "id": "a",
            "source": {"memory_embedding": [1, "2", 3]},
        },
        "line 4: the container has no vector field memory_embedding__1": {
            "kind": "long-term",
            "id": "a",
            "source": {"memory_embedding__1": [1, 2, 3]},
        },
    }
    for message, value in bad.items():
        with pytest.raises(BadRequest) as exc:
            target.document(4, value)
        assert exc.value.message.startswith(message), exc.value.message
