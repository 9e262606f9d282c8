"""Provable erasure on the real proxy and node (docs/opensearch-api.md "Erasure", docs/goodmem-api.md
"Erasing a user's data").

Two tenants (alice, bob) whose containers share the default indices, each holding memories of the same two
namespace users (ua, ub) of every type, written by an ``infer: true`` add (a session, working memory, the
extraction job, long-term memories and their history) and by the long-term write extension. An erasure's
receipt must count exactly what the node held of the user in scope, its verification must find nothing, and
everything out of scope (the other user, the other tenant's copy of the same user id) must be untouched. For
GoodMem: a user's own space with a text memory and a PDF (chunks, page images, a document job), and their
memory in another user's space, erased while the other user's data stays.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from proxy.core.infer.jobs import infer_job_id
from tests.adversarial.tenants import Tenant, make_tenant
from tests.opensearch_memory_helpers import EMBEDDING
from tests.support import documents as files

pytestmark = [pytest.mark.node, pytest.mark.timeout(600)]

MC = "/_plugins/_ml/memory_containers"
LLM = "memproxy-llm"  # a start-up --llm of the session's proxy (tests/conftest.py)
BASE = ".plugins-ml-am-default-memory-"  # the shared indices of every container without a prefix
TYPES = ("sessions", "working", "long-term", "history")
JOBS = "memproxy-jobs"


@dataclass
class World:
    url: str
    node: str
    root: httpx.Client
    alice: httpx.Client
    bob: httpx.Client
    ca: str  # alice's container
    cb: str  # bob's container, in the same indices
    working: dict[tuple[str, str], str]  # (container, user) → the working memory of its infer add


def _client(url: str, who: Tenant) -> httpx.Client:
    return httpx.Client(base_url=url, headers=who.headers, timeout=180)


def _container(client: httpx.Client) -> str:
    body = {
        "name": f"erase-{uuid.uuid4().hex[:8]}",
        "configuration": {
            **EMBEDDING,
            "llm_id": LLM,
            "strategies": [{"type": "SEMANTIC", "namespace": ["user_id"]}],
        },
    }
    made = client.post(f"{MC}/_create", json=body)
    assert made.status_code == 200, made.text
    return str(made.json()["memory_container_id"])


def _fill(client: httpx.Client, cid: str, user: str) -> str:
    """Memories of ``user`` of every type in ``cid``; the working memory id of the infer add."""
    said = f"I am {user}. I only drink green tea. I live in Lisbon."
    added = client.post(
        f"{MC}/{cid}/memories",
        params={"wait_for_inference": "true"},
        json={
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": said}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Noted."}]},
            ],
            "namespace": {"user_id": user},
            "infer": True,
        },
    )
    assert added.status_code == 200 and added.json()["inference"]["state"] == "COMPLETED", added.text
    bulk = client.post(
        f"{MC}/{cid}/memories/long-term/_memproxy_bulk",
        json={"memories": [{"memory": f"{user} fact {n}", "namespace": {"user_id": user}} for n in range(3)]},
    )
    assert bulk.status_code == 200, bulk.text
    return str(added.json()["working_memory_id"])


@pytest.fixture(scope="module")
def world(proxy_url: str, opensearch_url: str, admin_key: str) -> Iterator[World]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": admin_key}, timeout=180) as root:
        alice, bob = (_client(proxy_url, make_tenant(root, n)) for n in ("alice", "bob"))
        ca, cb = _container(alice), _container(bob)
        working = {
            (cid, user): _fill(client, cid, user)
            for cid, client in ((ca, alice), (cb, bob))
            for user in ("ua", "ub")
        }
        yield World(proxy_url, opensearch_url, root, alice, bob, ca, cb, working)
        for cid in (ca, cb):
            root.delete(f"{MC}/{cid}")
        alice.close()
        bob.close()


def _count(w: World, index: str, query: dict[str, Any]) -> int:
    answer = httpx.post(f"{w.node}/{index}/_count", json={"query": query}, timeout=60)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["count"])


def _of(w: World, cid: str, user: str) -> dict[str, int]:
    """What the node holds of ``user`` in ``cid``, per memory index, straight from the node."""
    terms = [{"term": {"memory_container_id": cid}}, {"term": {"namespace.user_id": user}}]
    scope = {"bool": {"filter": terms}}
    return {BASE + t: _count(w, BASE + t, scope) for t in TYPES}


def _job_exists(w: World, cid: str, user: str) -> bool:
    job = httpx.get(f"{w.node}/{JOBS}/_doc/{infer_job_id(w.working[(cid, user)])}", timeout=30)
    return bool(job.json().get("found"))


def _deleted(receipt: dict[str, Any]) -> dict[str, int]:
    return {entry["index"]: entry["deleted"] for entry in receipt["indices"]}


def _erase(client: httpx.Client, user: Any, cid: str | None = None) -> httpx.Response:
    path = f"{MC}/{cid}/_memproxy_erase" if cid else f"{MC}/_memproxy_erase"
    return client.post(path, json={"user_id": user})


def test_bad_input_is_400_and_erases_nothing(world: World) -> None:
    before = _of(world, world.ca, "ua")
    blank: list[Any] = [{"user_id": ""}, {"user_id": "   "}, {"user_id": 5}, {"user_id": "x" * 513}]
    bodies: list[Any] = [None, [], {}, *blank]
    for body in bodies:
        answer = world.alice.post(f"{MC}/{world.ca}/_memproxy_erase", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert "error" in answer.json()
    assert world.alice.post(f"{MC}/_memproxy_erase", json={"user_id": ""}).status_code == 400
    assert _of(world, world.ca, "ua") == before


def test_a_caller_without_the_right_gets_403_and_nothing_is_deleted(world: World) -> None:
    before = _of(world, world.ca, "ub")
    refused = _erase(world.bob, "ub", world.ca)
    assert refused.status_code == 403, refused.text
    assert _of(world, world.ca, "ub") == before
    assert _job_exists(world, world.ca, "ub")


def test_erasing_a_user_in_one_container_deletes_exactly_their_memories(world: World) -> None:
    mine = _of(world, world.ca, "ua")
    assert all(n > 0 for n in mine.values()), mine  # every type holds something of ua to erase
    others = {(c, u): _of(world, c, u) for c, u in ((world.ca, "ub"), (world.cb, "ua"), (world.cb, "ub"))}
    assert _job_exists(world, world.ca, "ua")

    answer = _erase(world.alice, "ua", world.ca)
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert receipt["user_id"] == "ua" and receipt["memory_container_ids"] == [world.ca]
    deleted = _deleted(receipt)
    # History holds the records written by the extraction (by namespace) and none of the other user's.
    assert {i: deleted.get(i) for i in mine} == mine
    assert deleted[JOBS] == 1  # the extraction job of ua's infer add (its payload holds the messages)
    assert receipt["total_deleted"] == sum(mine.values()) + 1
    assert receipt["erased_at"] > 1_600_000_000_000
    check = receipt["verification"]
    assert check["verified"] is True and check["rounds"] == 1
    assert {s["index"] for s in check["searched"]} >= {*mine, JOBS}
    assert all(s["found"] == 0 for s in check["searched"])
    long_term = next(e for e in receipt["indices"] if e["index"] == BASE + "long-term")
    assert len(long_term["ids"]) == long_term["deleted"] and long_term["ids_complete"] is True

    # Nothing of ua is left in alice's container, through the node or the API; everything else is intact.
    assert _of(world, world.ca, "ua") == {i: 0 for i in mine}
    assert not _job_exists(world, world.ca, "ua")
    inference = f"{MC}/{world.ca}/memories/working/{world.working[(world.ca, 'ua')]}/_memproxy_inference"
    assert world.alice.get(inference).status_code == 404
    search = world.alice.post(
        f"{MC}/{world.ca}/memories/long-term/_search",
        json={"query": {"term": {"namespace.user_id": "ua"}}},
    )
    assert search.status_code == 200 and search.json()["hits"]["hits"] == []
    for (cid, user), counts in others.items():
        assert _of(world, cid, user) == counts, (cid, user)
        assert _job_exists(world, cid, user)

    again = _erase(world.alice, "ua", world.ca)
    assert again.status_code == 200, again.text
    assert again.json()["total_deleted"] == 0 and again.json()["verification"]["verified"] is True
    assert all(e["deleted"] == 0 for e in again.json()["indices"])


def test_erasing_everywhere_stays_within_the_callers_containers(world: World) -> None:
    mine, bobs = _of(world, world.ca, "ub"), _of(world, world.cb, "ub")
    answer = _erase(world.alice, "ub")
    assert answer.status_code == 200, answer.text
    receipt = answer.json()
    assert world.ca in receipt["memory_container_ids"] and world.cb not in receipt["memory_container_ids"]
    assert receipt["verification"]["verified"] is True
    deleted = _deleted(receipt)
    assert {i: deleted.get(i) for i in mine} == mine
    assert _of(world, world.ca, "ub") == {i: 0 for i in mine}
    assert _of(world, world.cb, "ub") == bobs  # bob's container shares the indices and keeps its ub
    assert _job_exists(world, world.cb, "ub") and not _job_exists(world, world.ca, "ub")


def test_the_history_of_an_erased_memory_goes_whatever_its_namespace(world: World) -> None:
    """History records are found by their memory's id too: one of ue's memory without a user_id in its
    namespace (a strategy on another namespace key, say) goes; one of another memory stays."""
    written = world.alice.post(
        f"{MC}/{world.ca}/memories/long-term/_memproxy_add",
        json={"memory": "ue likes chess", "namespace": {"user_id": "ue"}},
    )
    assert written.status_code == 200, written.text
    memory_id = written.json()["long_term_memory_id"]
    history = BASE + "history"
    records = {}
    for name, about in (("linked", memory_id), ("other", str(uuid.uuid4()))):
        doc = {
            "memory_container_id": world.ca,
            "memory_id": about,
            "action": "ADD",
            "namespace": {"agent_id": "a1"},
            "created_time": int(time.time() * 1000),
        }
        made = httpx.post(
            f"{world.node}/{history}/_doc",
            params={"refresh": "true", "routing": world.ca},
            json=doc,
            timeout=30,
        )
        assert made.status_code == 201, made.text
        records[name] = made.json()["_id"]
    answer = _erase(world.alice, "ue", world.ca)
    assert answer.status_code == 200, answer.text
    deleted = _deleted(answer.json())
    assert deleted[history] == 1 and deleted[BASE + "long-term"] == 1

    def exists(doc_id: str) -> bool:
        got = httpx.get(f"{world.node}/{history}/_doc/{doc_id}", params={"routing": world.ca}, timeout=30)
        return bool(got.json().get("found"))

    assert not exists(records["linked"]) and exists(records["other"])
    httpx.delete(f"{world.node}/{history}/_doc/{records['other']}", params={"routing": world.ca}, timeout=30)


def _job_done(client: httpx.Client, path: str, state: str = "state", timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(path)
        assert got.status_code == 200, got.text
        job: dict[str, Any] = got.json()
        if job[state] in ("COMPLETED", "FAILED", "BACKGROUND_JOB_SUCCEEDED", "BACKGROUND_JOB_FAILED"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


def test_an_erasure_can_run_as_a_durable_job_with_its_receipt(world: World) -> None:
    world.working[(world.ca, "uc")] = _fill(world.alice, world.ca, "uc")
    mine = _of(world, world.ca, "uc")
    bad = world.alice.post(
        f"{MC}/{world.ca}/_memproxy_erase", params={"wait_for_completion": "soon"}, json={"user_id": "uc"}
    )
    assert bad.status_code == 400, bad.text
    started = world.alice.post(
        f"{MC}/{world.ca}/_memproxy_erase", params={"wait_for_completion": "false"}, json={"user_id": "uc"}
    )
    assert started.status_code == 200, started.text
    job_id = started.json()["job_id"]
    assert started.json()["state"] == "PENDING"
    job = _job_done(world.alice, f"{MC}/_memproxy_erase/{job_id}")
    assert job["state"] == "COMPLETED" and job["attempts"] == 1, job
    receipt = job["receipt"]
    assert receipt["user_id"] == "uc" and receipt["memory_container_ids"] == [world.ca]
    assert receipt["verification"]["verified"] is True
    deleted = _deleted(receipt)
    assert {i: deleted.get(i) for i in mine} == mine and deleted[JOBS] == 1
    assert _of(world, world.ca, "uc") == {i: 0 for i in mine}
    # Another tenant does not see the job, nor does anyone for an id that is no erasure.
    assert world.bob.get(f"{MC}/_memproxy_erase/{job_id}").status_code == 404
    other_job = infer_job_id(world.working[(world.cb, "ua")])
    assert world.root.get(f"{MC}/_memproxy_erase/{other_job}").status_code == 404


def test_a_dead_workers_erasure_job_is_finished_by_another_attempt_counting_both(world: World) -> None:
    """A worker that died mid-erasure leaves its job RUNNING with an expired lease and the tally it saved;
    the next claim runs it again, and the receipt adds what this attempt deleted to what the dead one had."""
    world.working[(world.ca, "ud")] = _fill(world.alice, world.ca, "ud")
    mine = _of(world, world.ca, "ud")
    long_term = BASE + "long-term"
    # The dead attempt had deleted 2 long-term memories (gone from the node, and counted in its tally).
    gone = httpx.post(
        f"{world.node}/{long_term}/_search",
        json={"size": 2, "query": {"term": {"namespace.user_id": "ud"}}, "_source": False},
        timeout=30,
    ).json()["hits"]["hits"]
    for hit in gone:
        httpx.delete(f"{world.node}/{long_term}/_doc/{hit['_id']}", params={"routing": world.ca}, timeout=30)
    httpx.post(f"{world.node}/{long_term}/_refresh", timeout=30)
    assert _of(world, world.ca, "ud")[long_term] == mine[long_term] - 2
    now = int(time.time() * 1000)
    job_id = str(uuid.uuid4())
    me = world.alice.get("/v1/users/me").json()["userId"]
    doc = {
        "kind": "erase",
        "state": "RUNNING",
        "payload": {"user_id": "ud", "container_ids": [world.ca]},
        "owner_id": me,
        "attempts": 1,
        "max_attempts": 5,
        "lease_owner": "dead-host:1:x",
        "lease_expires_at": now - 1000,
        "not_before": now - 60_000,
        "created_at": now - 60_000,
        "updated_at": now - 30_000,
        "started_at": now - 60_000,
        "progress": {"deleted": {long_term: 2}, "ids": {long_term: [h["_id"] for h in gone]}},
    }
    path = f"{world.node}/{JOBS}/_doc/{job_id}"
    written = httpx.put(path, params={"refresh": "true"}, json=doc, timeout=30)
    assert written.status_code in (200, 201), written.text
    job = _job_done(world.alice, f"{MC}/_memproxy_erase/{job_id}")
    assert job["state"] == "COMPLETED" and job["attempts"] == 2, job
    receipt = job["receipt"]
    assert receipt["verification"]["verified"] is True
    deleted = _deleted(receipt)
    assert {i: deleted.get(i) for i in mine} == mine  # both attempts together: everything there was
    listed = next(e["ids"] for e in receipt["indices"] if e["index"] == long_term)
    assert {h["_id"] for h in gone} <= set(listed)
    assert _of(world, world.ca, "ud") == {i: 0 for i in mine}


# --- GoodMem ------------------------------------------------------------------------------------------


@dataclass
class People:
    carol: Tenant
    dave: Tenant
    own_space: str
    own_memories: list[str]
    dave_space: str
    carols_in_daves: str
    daves_own: str


def _wait_done(client: httpx.Client, memory_id: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(f"/v1/memories/{memory_id}", params={"includeProcessingHistory": "true"})
        assert got.status_code == 200, got.text
        memory = got.json()
        job = memory.get("processingHistory", {}).get("latestJob", {})
        if memory["processingStatus"] in ("COMPLETED", "FAILED") and job.get("status") not in (
            "BACKGROUND_JOB_PENDING",
            "BACKGROUND_JOB_RUNNING",
        ):
            return
        assert time.monotonic() < deadline, memory
        time.sleep(0.3)


def _space(client: httpx.Client) -> str:
    made = client.post(
        "/v1/spaces",
        json={
            "name": f"erase-{uuid.uuid4().hex[:8]}",
            "spaceEmbedders": [{"embedderId": "all-minilm-l6-v2"}],
        },
    )
    assert made.status_code in (200, 201), made.text
    return str(made.json()["spaceId"])


def _memory(client: httpx.Client, space: str, text: str) -> str:
    made = client.post("/v1/memories", json={"spaceId": space, "originalContent": text})
    assert made.status_code in (200, 201), made.text
    return str(made.json()["memoryId"])


@pytest.fixture(scope="module")
def people(world: World) -> Iterator[People]:
    carol, dave = make_tenant(world.root, "carol"), make_tenant(world.root, "dave")
    with _client(world.url, carol) as c, _client(world.url, dave) as d:
        own = _space(c)
        text = _memory(c, own, "Carol's notes. " * 200)  # several chunks
        pdf = c.post(
            "/v1/memories",
            json={
                "spaceId": own,
                "originalContentB64": base64.b64encode(files.text_pdf(["Carol's page."])).decode(),
                "contentType": "application/pdf",
            },
        )
        assert pdf.status_code in (200, 201), pdf.text
        _wait_done(c, pdf.json()["memoryId"])
        daves = _space(d)
        grant = d.post(
            "/v1/access-policy/grants",
            json={
                "audience": {"principalId": carol.user_id},
                "rule": {
                    "operation": "CREATE_MEMORY",
                    "selector": "EXACT",
                    "assignedResource": {"kind": "SPACE", "resourceId": daves},
                },
            },
        )
        assert grant.status_code in (200, 201), grant.text
        yield People(
            carol,
            dave,
            own,
            [text, pdf.json()["memoryId"]],
            daves,
            _memory(c, daves, "Carol wrote this in Dave's space."),
            _memory(d, daves, "Dave's own memory."),
        )
    world.root.delete(f"/v1/spaces/{daves}")
    world.root.delete(f"/v1/spaces/{own}")


def _space_docs(w: World, index: str, field: str, value: str) -> int:
    return _count(w, index, {"term": {field: value}})


def test_goodmem_erasure_of_a_user_refuses_others_and_bad_input(world: World, people: People) -> None:
    with _client(world.url, people.dave) as d:
        refused = d.post(f"/v1/users/{people.carol.user_id}:erase")
        assert refused.status_code == 403, refused.text
    own = f"/v1/users/{people.carol.user_id}:erase"
    with _client(world.url, people.carol) as c:
        assert c.post(own, json={"deleteUser": "yes"}).status_code == 400
        # Deleting the account needs an administrator, even one's own.
        assert c.post(own, json={"deleteUser": True}).status_code == 403
    assert world.root.post("/v1/users/not-a-uuid:erase").status_code == 400
    assert world.root.post(f"/v1/users/{uuid.uuid4()}:erase").status_code == 404
    root_id = world.root.get("/v1/users/me").json()["userId"]
    assert world.root.post(f"/v1/users/{root_id}:erase").status_code == 400
    assert world.root.get(f"/v1/spaces/{people.own_space}").status_code == 200
    assert _space_docs(world, "memproxy-goodmem-memories", "space_id", people.own_space) == 2


def test_goodmem_user_erases_their_data_and_others_stay(world: World, people: People) -> None:
    lt = BASE.replace("default", "*") + "long-term,*-memory-long-term"
    own_chunks = _count(world, lt, {"term": {"memory_container_id": people.own_space}})
    pages = _space_docs(world, "memproxy-goodmem-pages", "space_id", people.own_space)
    assert own_chunks > 2 and pages == 1
    daves_chunks = _count(world, lt, {"term": {"memory_id": people.daves_own}})
    with _client(world.url, people.carol) as c:
        answer = c.post(f"/v1/users/{people.carol.user_id}:erase")
        assert answer.status_code == 200, answer.text
        receipt = answer.json()
        assert receipt["spaceIds"] == [people.own_space] and receipt["userDeleted"] is False
        assert receipt["verification"]["verified"] is True
        assert all(s["found"] == 0 for s in receipt["verification"]["searched"])
        deleted = _deleted(receipt)
        assert deleted["memproxy-goodmem-memories"] == 3  # two in her space, one in Dave's
        assert deleted["memproxy-goodmem-pages"] == 1
        assert deleted[".plugins-ml-am-memory-container"] == 1
        assert sum(n for i, n in deleted.items() if i.endswith("-memory-long-term")) >= own_chunks + 1
        assert deleted[JOBS] >= 1  # the PDF's document job
        # The account stays and works; the data is gone, by the API and on the node.
        assert c.get("/v1/users/me").status_code == 200
        assert c.get(f"/v1/memories/{people.carols_in_daves}").status_code in (403, 404)
    assert world.root.get(f"/v1/spaces/{people.own_space}").status_code == 404
    for memory_id in [*people.own_memories, people.carols_in_daves]:
        assert world.root.get(f"/v1/memories/{memory_id}").status_code == 404
        assert _count(world, lt, {"term": {"memory_id": memory_id}}) == 0
    assert _count(world, lt, {"term": {"memory_container_id": people.own_space}}) == 0
    assert _space_docs(world, "memproxy-goodmem-pages", "space_id", people.own_space) == 0
    assert _space_docs(world, "memproxy-goodmem-memories", "space_id", people.own_space) == 0
    # Dave's space and his memory stay.
    assert world.root.get(f"/v1/spaces/{people.dave_space}").status_code == 200
    assert world.root.get(f"/v1/memories/{people.daves_own}").status_code == 200
    assert _count(world, lt, {"term": {"memory_id": people.daves_own}}) == daves_chunks > 0

    # Again, by an administrator, with the account: nothing more of the data, then the key and the user.
    again = world.root.post(f"/v1/users/{people.carol.user_id}:erase", json={"deleteUser": True})
    assert again.status_code == 200, again.text
    receipt = again.json()
    assert receipt["userDeleted"] is True and receipt["spaceIds"] == []
    deleted = _deleted(receipt)
    assert deleted["memproxy-goodmem-apikeys"] == 1
    assert receipt["totalDeleted"] == 1 + deleted["memproxy-goodmem-grants"]
    assert httpx.get(world.url + "/v1/users/me", headers=people.carol.headers).status_code == 401
    user = world.root.get(f"/v1/users/{people.carol.user_id}", params={"includeDeleted": "true"}).json()
    assert user.get("email", "") == "" and user.get("deletedAt")


def test_deleting_a_space_deletes_its_page_images(world: World, people: People) -> None:
    """A space's delete (which erasure ends with) leaves no page image behind: they name the space only."""
    with _client(world.url, people.dave) as d:
        space = _space(d)
        pdf = d.post(
            "/v1/memories",
            json={
                "spaceId": space,
                "originalContentB64": base64.b64encode(files.text_pdf(["Dave's page."])).decode(),
                "contentType": "application/pdf",
            },
        )
        assert pdf.status_code in (200, 201), pdf.text
        _wait_done(d, pdf.json()["memoryId"])
        assert _space_docs(world, "memproxy-goodmem-pages", "space_id", space) == 1
        assert d.delete(f"/v1/spaces/{space}").status_code == 204
    assert _space_docs(world, "memproxy-goodmem-pages", "space_id", space) == 0


def test_a_user_erasure_can_run_as_a_durable_job(world: World, people: People) -> None:
    erin = make_tenant(world.root, "erin")
    with _client(world.url, erin) as e:
        space = _space(e)
        _memory(e, space, "Erin's memory.")
        started = e.post(f"/v1/users/{erin.user_id}:erase", params={"waitForCompletion": "false"})
        assert started.status_code == 202, started.text
        job_id = started.json()["jobId"]
        with _client(world.url, people.dave) as d:
            assert d.get(f"/v1/users/{erin.user_id}/erasures/{job_id}").status_code == 403
        assert e.get(f"/v1/users/{erin.user_id}/erasures/{uuid.uuid4()}").status_code == 404
        job = _job_done(e, f"/v1/users/{erin.user_id}/erasures/{job_id}", state="status")
        assert job["status"] == "BACKGROUND_JOB_SUCCEEDED", job
        receipt = job["receipt"]
        assert receipt["spaceIds"] == [space] and receipt["verification"]["verified"] is True
        deleted = _deleted(receipt)
        assert deleted["memproxy-goodmem-memories"] == 1 and deleted[".plugins-ml-am-memory-container"] == 1
    assert world.root.get(f"/v1/spaces/{space}").status_code == 404
