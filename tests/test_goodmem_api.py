"""The GoodMem API (everything but retrieve) against the real proxy and node, driven by both real clients:
``goodmem`` 0.1.43 (Gen B) and ``goodmem-client`` 1.5.14 (Gen A), plus raw HTTP for wire details."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from goodmem import Goodmem, MemoryCreationRequest
from goodmem import errors as gerr

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import goodmem_client as gc
    from goodmem_client import models as gm_models

pytestmark = pytest.mark.timeout(300)


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root_key(proxy_url: str, opensearch_url: str) -> str:
    boot = Goodmem(base_url=proxy_url, api_key="")
    res = boot.system.init()
    if res.already_initialized:
        # The node outlives test runs: forget the instance record so that init issues a fresh root key.
        httpx.delete(f"{opensearch_url}/memproxy-goodmem-system/_doc/instance", params={"refresh": "true"})
        res = boot.system.init()
    assert res.root_api_key and res.root_api_key.startswith("gm_") and res.user_id
    again = boot.system.init()
    assert again.already_initialized and again.root_api_key is None
    return res.root_api_key


@pytest.fixture(scope="module")
def gm(proxy_url: str, root_key: str) -> Iterator[Goodmem]:
    with Goodmem(base_url=proxy_url, api_key=root_key) as client:
        yield client


@pytest.fixture(scope="module")
def ga(proxy_url: str, root_key: str) -> gc.ApiClient:
    cfg = gc.Configuration(host=proxy_url)
    cfg.api_key = {"ApiKeyAuth": root_key}
    return gc.ApiClient(cfg)


@pytest.fixture(scope="module")
def http(proxy_url: str, root_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=proxy_url, headers={"x-api-key": root_key}, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def embedder_id(gm: Goodmem) -> str:
    embedders = list(gm.embedders.list())
    assert embedders, "the registry has at least the default model"
    return str(embedders[0].embedder_id)


@pytest.fixture(scope="module")
def space(gm: Goodmem, embedder_id: str) -> Any:
    sp = gm.spaces.create(
        name=f"gm-test-{uuid.uuid4().hex[:8]}",
        space_embedders=[{"embedder_id": embedder_id}],
        labels={"suite": "goodmem-api"},
        space_id=str(uuid.uuid4()),
    )
    yield sp
    with contextlib.suppress(gerr.NotFoundError):
        gm.spaces.delete(id=sp.space_id)


User = tuple[str, Goodmem, str]  # (user id, client, raw key)


def _user_client(gm: Goodmem, proxy_url: str) -> User:
    """A second principal: root creates the user (Gen B) and issues its key (``subjectPrincipalId``)."""
    user = gm.users.create(email=f"u-{uuid.uuid4().hex[:8]}@example.com", display_name="Test user")
    key = gm.apikeys.create(subject_principal_id=user.user_id)
    assert key.raw_api_key and key.api_key_metadata.subject_principal_id == user.user_id
    return user.user_id, Goodmem(base_url=proxy_url, api_key=key.raw_api_key), key.raw_api_key


@pytest.fixture(scope="module")
def alice(gm: Goodmem, proxy_url: str) -> User:
    return _user_client(gm, proxy_url)


@pytest.fixture(scope="module")
def bob(gm: Goodmem, proxy_url: str) -> User:
    return _user_client(gm, proxy_url)


# --- system, auth, keys, users --------------------------------------------------------------------


def test_system_info_both_generations(gm: Goodmem, ga: gc.ApiClient) -> None:
    info_b = gm.system.info()
    info_a = gc.SystemApi(ga).get_system_info()
    assert info_b.version == info_a.version and isinstance(info_a.major, int)
    assert gc.SystemApi(ga).initialize_system(body={}).already_initialized


def test_authentication(proxy_url: str, root_key: str) -> None:
    no_key = httpx.get(f"{proxy_url}/v1/spaces")
    assert no_key.status_code == 401 and no_key.json() == {"error": "No API key provided.", "status": 401}
    bogus = httpx.get(f"{proxy_url}/v1/spaces", headers={"x-api-key": "gm_not-a-key"})
    assert bogus.status_code == 401 and "Invalid" in bogus.json()["error"]
    bearer = httpx.get(f"{proxy_url}/v1/users/me", headers={"Authorization": f"Bearer {root_key}"})
    assert bearer.status_code == 200 and bearer.json()["displayName"]
    with pytest.raises(gerr.AuthenticationError):
        Goodmem(base_url=proxy_url, api_key="gm_wrong").spaces.list().data  # noqa: B018


def test_api_keys_lifecycle(gm: Goodmem, ga: gc.ApiClient, proxy_url: str) -> None:
    created = gc.APIKeysApi(ga).create_api_key(
        create_api_key_request=gm_models.CreateApiKeyRequest(labels={"purpose": "test"})
    )
    meta = created.api_key_metadata
    assert (
        created.raw_api_key.startswith("gm_")
        and meta.status == "ACTIVE"
        and meta.labels == {"purpose": "test"}
    )
    listed = gc.APIKeysApi(ga).list_api_keys().keys
    assert meta.api_key_id in [k.api_key_id for k in listed]
    new_client = Goodmem(base_url=proxy_url, api_key=created.raw_api_key)
    assert new_client.users.me().user_id == meta.user_id
    got = gm.apikeys.get(id=meta.api_key_id)
    assert got.lifecycle_state == "USABLE" and got.key_prefix == created.raw_api_key[: len(got.key_prefix)]
    updated = gm.apikeys.update(
        id=meta.api_key_id, request={"status": "INACTIVE", "merge_labels": {"x": "y"}}
    )
    assert (
        updated.status == "INACTIVE" and updated.lifecycle_state == "REVOKED" and updated.labels["x"] == "y"
    )
    with pytest.raises(gerr.AuthenticationError):
        new_client.users.me()
    gc.APIKeysApi(ga).delete_api_key(id=meta.api_key_id)
    with pytest.raises(gerr.NotFoundError):
        gm.apikeys.get(id=meta.api_key_id)
    with pytest.raises(gerr.BadRequestError):
        gm.apikeys.create(expires_at=1000)


def test_users(gm: Goodmem, ga: gc.ApiClient, alice: User) -> None:
    me_a = gc.UsersApi(ga).get_current_user()
    assert me_a.user_id == gm.users.me().user_id and me_a.display_name
    alice_id, alice_client, _ = alice
    assert alice_client.users.me().user_id == alice_id
    assert gm.users.get(id=alice_id).user_id == alice_id
    assert alice_id in [u.user_id for u in gm.users.list()]
    assert [u.user_id for u in alice_client.users.list()] == [alice_id]
    assert gm.instance.get().owner_id == me_a.user_id
    with pytest.raises(gerr.PermissionDeniedError):
        alice_client.users.get(id=me_a.user_id)
    with pytest.raises(gerr.PermissionDeniedError):
        alice_client.users.create(email="nope@example.com")
    with pytest.raises(gerr.ConflictError):
        gm.users.create(email=me_a.email)


# --- embedders ------------------------------------------------------------------------------------


def test_embedders(gm: Goodmem, ga: gc.ApiClient, embedder_id: str, space: Any) -> None:
    listed_a = gc.EmbeddersApi(ga).list_embedders().embedders
    assert embedder_id in [e.embedder_id for e in listed_a]
    one = gm.embedders.get(id=embedder_id)
    assert (
        one.dimensionality > 0 and one.distribution_type == "DENSE" and one.supported_modalities == ["TEXT"]
    )
    renamed = gm.embedders.update(id=embedder_id, request={"merge_labels": {"tested": "yes"}})
    assert renamed.labels.get("tested") == "yes"
    with pytest.raises(gerr.BadRequestError):
        gm.embedders.update(id=embedder_id, request={"dimensionality": one.dimensionality + 1})
    # A provider embedder is registered (tests/test_goodmem_models.py uses them); the spec's own example.
    created = gm.embedders.create(
        display_name="remote",
        model_identifier=f"my-model-{uuid.uuid4().hex[:6]}",
        provider_type="TEI",
        endpoint_url="http://127.0.0.1:9000",
        dimensionality=384,
    )
    assert created.api_path == "/embed" and created.provider_type == "TEI"
    gm.embedders.delete(id=created.embedder_id)
    with pytest.raises(gerr.ConflictError):
        gm.embedders.delete(id=embedder_id)  # the space uses it
    with pytest.raises(gerr.NotFoundError):
        gm.embedders.get(id=str(uuid.uuid4()))


# --- spaces ---------------------------------------------------------------------------------------


def test_space_crud_gen_b(gm: Goodmem, embedder_id: str) -> None:
    tag = uuid.uuid4().hex[:8]
    made = [
        gm.spaces.create(
            name=f"list-{tag}-{i}", space_embedders=[{"embedder_id": embedder_id}], labels={"t": tag}
        )
        for i in range(3)
    ]
    try:
        sp = made[0]
        assert sp.default_chunking_config.recursive.chunk_size == 512
        assert sp.space_embedders[0].default_retrieval_weight == 1.0
        got = gm.spaces.get(id=sp.space_id)
        assert got.name == sp.name and got.labels == {"t": tag}
        page = gm.spaces.list(label={"t": tag}, page_size=2, sort_by="name", sort_order="ASCENDING")
        assert len(page.data) == 2 and page.next_token
        assert [s.name for s in page] == [f"list-{tag}-{i}" for i in range(3)]
        by_glob = gm.spaces.list(name_filter=f"list-{tag}-[12]", sort_by="name", sort_order="DESCENDING")
        assert [s.name for s in by_glob] == [
            f"list-{tag}-2",
            f"list-{tag}-1",
        ]
        updated = gm.spaces.update(
            id=sp.space_id, request={"name": f"renamed-{tag}", "merge_labels": {"m": "1"}}
        )
        assert updated.name == f"renamed-{tag}" and updated.labels == {"t": tag, "m": "1"}
        with pytest.raises(gerr.ConflictError):
            gm.spaces.update(id=made[1].space_id, request={"name": f"renamed-{tag}"})
        with pytest.raises(gerr.ConflictError):
            gm.spaces.create(name=f"renamed-{tag}", space_embedders=[{"embedder_id": embedder_id}])
        with pytest.raises(gerr.ConflictError):
            gm.spaces.create(
                name="dup-id", space_embedders=[{"embedder_id": embedder_id}], space_id=sp.space_id
            )
    finally:
        for s in made:
            gm.spaces.delete(id=s.space_id)
    with pytest.raises(gerr.NotFoundError):
        gm.spaces.get(id=made[0].space_id)
    with pytest.raises(gerr.NotFoundError):
        gm.spaces.delete(id=made[0].space_id)


def test_space_gen_a(ga: gc.ApiClient, embedder_id: str) -> None:
    api = gc.SpacesApi(ga)
    chunking = gm_models.ChunkingConfiguration(
        gm_models.ChunkingConfigurationOneOf2(
            sentence=gm_models.SentenceChunkingConfiguration(
                max_chunk_size=200, min_chunk_size=20, length_measurement="CHARACTER_COUNT"
            )
        )
    )
    sp = api.create_space(
        space_creation_request=gm_models.SpaceCreationRequest(
            name=f"gen-a-{uuid.uuid4().hex[:8]}",
            space_embedders=[
                gm_models.SpaceEmbedderConfig(embedder_id=embedder_id, default_retrieval_weight=0.5)
            ],
            default_chunking_config=chunking,
            public_read=False,
            labels={"gen": "a"},
        )
    )
    try:
        assert sp.public_read is False and sp.space_embedders[0].default_retrieval_weight == 0.5
        assert (
            api.get_space(id=sp.space_id).default_chunking_config.to_dict()["sentence"]["maxChunkSize"] == 200
        )
        listed = api.list_spaces(label={"gen": "a"}, max_results=1000).spaces
        assert sp.space_id in [s.space_id for s in listed]
        upd = api.update_space(
            id=sp.space_id, update_space_request=gm_models.UpdateSpaceRequest(public_read=True)
        )
        assert upd.public_read is True
    finally:
        api.delete_space(id=sp.space_id)


# --- memories -------------------------------------------------------------------------------------


TEXT = "Manila office runbook.\n\nRotate the VPN keys every month. Check backups on Fridays!\nDone."


def test_memory_lifecycle_gen_b(gm: Goodmem, space: Any, http: httpx.Client, opensearch_url: str) -> None:
    chunking = {
        "recursive": {
            "chunkSize": 40,
            "chunkOverlap": 0,
            "keepStrategy": "KEEP_END",
            "lengthMeasurement": "CHARACTER_COUNT",
        }
    }
    mem = gm.memories.create(
        space_id=space.space_id,
        original_content=TEXT,
        metadata={"city": "Manila", "n": 3},
        chunking_config=chunking,
        memory_id=str(uuid.uuid4()),
    )
    assert mem.processing_status == "COMPLETED" and mem.original_content is None
    assert mem.original_content_length == len(TEXT.encode()) and mem.metadata == {"city": "Manila", "n": 3}
    full = gm.memories.get(id=mem.memory_id, include_content=True)
    assert full.original_content == TEXT.encode()
    # Chunks are long-term documents of the space's container, with exact offsets.
    index = http.get(f"/_plugins/_ml/memory_containers/{space.space_id}").json()["configuration"][
        "index_prefix"
    ]
    found = httpx.post(
        f"{opensearch_url}/.plugins-ml-am-{index}-memory-long-term/_search",
        params={"expand_wildcards": "all"},
        json={
            "query": {"term": {"memory_id": mem.memory_id}},
            "sort": [{"chunk_sequence": "asc"}],
            "size": 50,
        },
    ).json()["hits"]["hits"]
    assert len(found) >= 3
    for hit in found:
        src = hit["_source"]
        assert TEXT[src["start_offset"] : src["end_offset"]] == src["memory"]
        assert src["memory_container_id"] == space.space_id and src["metadata"] == {"city": "Manila", "n": 3}
    with pytest.raises(gerr.ConflictError):
        gm.memories.create(space_id=space.space_id, original_content="again", memory_id=mem.memory_id)
    gm.memories.delete(id=mem.memory_id)
    with pytest.raises(gerr.NotFoundError):
        gm.memories.get(id=mem.memory_id)
    with pytest.raises(gerr.NotFoundError):
        gm.memories.delete(id=mem.memory_id)


def test_base64_and_multipart(gm: Goodmem, space: Any, http: httpx.Client, tmp_path: Any) -> None:
    data = b"# Title\n\nsome markdown"
    mem = gm.memories.create(
        space_id=space.space_id,
        original_content_b64=base64.b64encode(data).decode(),
        content_type="text/markdown",
    )
    assert gm.memories.get(id=mem.memory_id, include_content=True).original_content == data
    assert http.get(f"/v1/memories/{mem.memory_id}/content").content == data
    path = tmp_path / "note.txt"
    path.write_text("uploaded through multipart")
    up = gm.memories.create(space_id=space.space_id, file_path=str(path))
    assert up.content_type.startswith("text/plain")
    assert (
        gm.memories.get(id=up.memory_id, include_content=True).original_content
        == b"uploaded through multipart"
    )
    # Documents are processed by a job (tests/test_documents_api.py); bytes memproxy cannot read are a 400.
    binary = http.post(
        "/v1/memories",
        json={"spaceId": space.space_id, "originalContentB64": "TVqQAA==", "contentType": "application/zip"},
    )
    assert binary.status_code == 400 and "application/pdf" in binary.json()["error"]
    gm.memories.batch_delete(requests=[{"memory_id": mem.memory_id}, {"memory_id": up.memory_id}])


def test_batch_list_filter_delete(gm: Goodmem, embedder_id: str) -> None:
    sp = gm.spaces.create(
        name=f"batch-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}]
    )
    try:
        cities = ["Manila", "Paris", "manila", "Oslo", "Lima"]
        res = gm.memories.batch_create(
            requests=[
                MemoryCreationRequest(
                    space_id=sp.space_id, original_content=f"Note {i} about {c}", metadata={"city": c}
                )
                for i, c in enumerate(cities)
            ]
            + [MemoryCreationRequest(space_id=str(uuid.uuid4()), original_content="orphan")]
            + [
                MemoryCreationRequest(
                    space_id=sp.space_id, original_content="x", metadata={"big": "x" * 9000}
                )
            ]
        )
        assert [r.success for r in res.results] == [True] * 5 + [False, False]
        assert [r.error.code for r in res.results[5:]] == [404, 400]
        ids = [r.memory.memory_id for r in res.results[:5]]
        assert len(set(ids)) == 5
        listed = [m.memory_id for m in gm.memories.list(space_id=sp.space_id, page_size=2)]
        assert sorted(listed) == sorted(ids) and len(listed) == 5
        completed = list(gm.memories.list(space_id=sp.space_id, status_filter="COMPLETED"))
        assert len(completed) == 5 and not list(
            gm.memories.list(space_id=sp.space_id, status_filter="PENDING")
        )
        expr = "lower(CAST(val('$.city') AS TEXT)) = 'manila'"
        manila = {m.memory_id for m in gm.memories.list(space_id=sp.space_id, filter=expr)}
        assert manila == {ids[0], ids[2]}
        got = gm.memories.batch_get(memory_ids=[ids[1], str(uuid.uuid4())])
        assert got.results[0].success and not got.results[1].success and got.results[1].error.code == 404
        deleted = gm.memories.batch_delete(
            requests=[
                {"memory_id": ids[1]},
                {"filter_selector": {"space_id": sp.space_id, "status_filter": "COMPLETED"}},
            ]
        )
        assert deleted.total_deleted == 5 and [r.deleted_count for r in deleted.results] == [1, 4]
        assert not list(gm.memories.list(space_id=sp.space_id))
    finally:
        gm.spaces.delete(id=sp.space_id)


def test_paging_and_selector_delete_reach_past_ten_thousand(
    gm: Goodmem, http: httpx.Client, embedder_id: str
) -> None:
    """More memories than OpenSearch's 10 000-hit window, half of them created in the same millisecond: every
    one is listed exactly once and in order, in two sort orders, and one selector deletes them all."""
    sp = gm.spaces.create(name=f"deep-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}])
    try:
        real = {
            gm.memories.create(
                space_id=sp.space_id, original_content=f"deep paging {i}", content_type="text/plain"
            ).memory_id
            for i in range(3)
        }
        exported = [
            json.loads(line)
            for line in http.get(f"/_memproxy/containers/{sp.space_id}/_export").text.splitlines()
        ]
        chunk = next(line["source"] for line in exported if line.get("kind") == "long-term")
        # Memories written through the OpenSearch API (no GoodMem record): the admin import writes them in
        # bulk. Their vectors are left out: the listing never reads them, and they would only cost time.
        base = {k: v for k, v in chunk.items() if not k.startswith("memory_embedding") and k != "memory_id"}
        tie = chunk["created_time"]
        count = 10_150
        lines = [exported[0]] + [
            {
                "kind": "long-term",
                "id": f"deep-{i:05d}",
                "source": {
                    **base,
                    "memory": f"imported {i}",
                    "created_time": tie if i % 2 else tie - 1000 - i,
                },
            }
            for i in range(count)
        ]
        resp = http.post(
            f"/_memproxy/containers/{sp.space_id}/_import", content="\n".join(json.dumps(x) for x in lines)
        )
        assert resp.status_code == 200 and resp.json()["imported"] == count, resp.text
        expected = real | {f"deep-{i:05d}" for i in range(count)}

        newest_first = list(gm.memories.list(space_id=sp.space_id, page_size=500))
        assert len(newest_first) == len(expected) and {m.memory_id for m in newest_first} == expected
        created = [m.created_at for m in newest_first]
        assert created == sorted(created, reverse=True)

        # content_type: the records' "text/plain", then the imported memories, which have none (null sort
        # values carried in the token), told apart only by the last keys of the order.
        seen: list[str] = []
        token = ""
        while True:
            params = {
                "sortBy": "content_type",
                "sortOrder": "ASCENDING",
                "maxResults": "500",
                "nextToken": token,
            }
            page = http.get(f"/v1/spaces/{sp.space_id}/memories", params=params)
            assert page.status_code == 200, page.text
            seen += [m["memoryId"] for m in page.json()["memories"]]
            token = page.json().get("nextToken")
            if not token:
                break
        assert len(seen) == len(expected) and set(seen) == expected and set(seen[:3]) == real

        first = http.get(f"/v1/spaces/{sp.space_id}/memories", params={"maxResults": 2}).json()["nextToken"]
        other_order = http.get(
            f"/v1/spaces/{sp.space_id}/memories", params={"nextToken": first, "sortBy": "updated_at"}
        )
        assert other_order.status_code == 400
        assert "Invalid nextToken" in other_order.json()["error"]
        forged = base64.urlsafe_b64encode(
            json.dumps({"s": ["created_time", True], "a": ["not a time", 1, "a", "b"]}).encode()
        )
        wrong_values = http.get(f"/v1/spaces/{sp.space_id}/memories", params={"nextToken": forged.decode()})
        assert wrong_values.status_code == 400, wrong_values.text
        assert "Invalid nextToken" in wrong_values.json()["error"]

        deleted = gm.memories.batch_delete(requests=[{"filter_selector": {"space_id": sp.space_id}}])
        assert deleted.total_deleted == len(expected)
        assert not list(gm.memories.list(space_id=sp.space_id))
    finally:
        gm.spaces.delete(id=sp.space_id)


def test_memories_gen_a(ga: gc.ApiClient, space: Any) -> None:
    api = gc.MemoriesApi(ga)
    mem = api.create_memory(
        json_memory_creation_request=gm_models.JsonMemoryCreationRequest(
            space_id=space.space_id, original_content="hello from generation A", content_type="text/plain"
        )
    )
    assert mem.processing_status == "COMPLETED" and mem.page_image_count == 0
    got = api.get_memory(id=mem.memory_id, include_content=True)
    assert base64.b64decode(got.original_content) == b"hello from generation A"
    assert mem.memory_id in [
        m.memory_id for m in api.list_memories(space_id=space.space_id, max_results=500).memories
    ]
    batch = api.batch_create_memory(
        json_batch_memory_creation_request=gm_models.JsonBatchMemoryCreationRequest(
            requests=[
                gm_models.JsonMemoryCreationRequest(
                    space_id=space.space_id, original_content=f"a{i}", content_type="text/plain"
                )
                for i in range(2)
            ]
        )
    )
    assert len(batch.results) == 2 and all(r.success for r in batch.results)
    gone = api.batch_delete_memory(
        batch_memory_deletion_request=gm_models.BatchMemoryDeletionRequest(
            requests=[
                gm_models.BatchDeleteMemorySelectorRequest(memory_id=r.memory.memory_id)
                for r in batch.results
            ]
        )
    )
    assert len(gone.results) == 2 and all(r.success for r in gone.results)
    api.delete_memory(id=mem.memory_id)


# --- cross-API ---------------------------------------------------------------------------------------------


def test_space_is_a_container_and_back(gm: Goodmem, http: httpx.Client, embedder_id: str) -> None:
    sp = gm.spaces.create(
        name=f"cross-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}]
    )
    container = http.get(f"/_plugins/_ml/memory_containers/{sp.space_id}")
    assert container.status_code == 200 and container.json()["name"] == sp.name
    assert container.json()["configuration"]["embedding_model_id"] == embedder_id
    gm.spaces.delete(id=sp.space_id)
    assert http.get(f"/_plugins/_ml/memory_containers/{sp.space_id}").status_code == 404

    made = http.post(
        "/_plugins/_ml/memory_containers/_create",
        json={
            "name": f"os-{uuid.uuid4().hex[:8]}",
            "configuration": {
                "embedding_model_type": "TEXT_EMBEDDING",
                "embedding_model_id": embedder_id,
                "embedding_dimension": gm.embedders.get(id=embedder_id).dimensionality,
                "index_prefix": f"gm-cross-api-test-{embedder_id[:8]}",
            },
        },
    )
    assert made.status_code == 200, made.text
    cid = made.json()["memory_container_id"]
    try:
        as_space = gm.spaces.get(id=cid)
        assert as_space.space_embedders[0].embedder_id == embedder_id
        assert cid in [s.space_id for s in gm.spaces.list()]
        added = http.post(
            f"/_plugins/_ml/memory_containers/{cid}/memories/long-term/_memproxy_add",
            json={"memory": "Written through the OpenSearch API", "namespace": {"user_id": "bob"}},
        )
        assert added.status_code == 200, added.text
        lt_id = added.json()["long_term_memory_id"]
        mem = gm.memories.create(space_id=cid, original_content="Written through GoodMem")
        listed = {m.memory_id: m for m in gm.memories.list(space_id=cid, include_content=True)}
        assert set(listed) == {lt_id, mem.memory_id}
        assert listed[lt_id].original_content == b"Written through the OpenSearch API"
        assert gm.memories.get(id=lt_id).processing_status == "COMPLETED"
        hits = http.post(
            f"/_plugins/_ml/memory_containers/{cid}/memories/long-term/_semantic_search",
            json={"query": "Written through GoodMem", "k": 5},
        ).json()["hits"]["hits"]
        assert mem.memory_id in [h["_source"].get("memory_id") for h in hits]
        gm.memories.delete(id=lt_id)
        assert [m.memory_id for m in gm.memories.list(space_id=cid)] == [mem.memory_id]
    finally:
        gm.spaces.delete(id=cid)


def test_container_delete_through_opensearch_api_removes_goodmem_records(
    gm: Goodmem, http: httpx.Client, embedder_id: str, opensearch_url: str
) -> None:
    sp = gm.spaces.create(
        name=f"os-delete-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}]
    )
    mem = gm.memories.create(
        space_id=sp.space_id, original_content="A record that must not outlive its space"
    )

    def records() -> int:
        res = httpx.post(
            f"{opensearch_url}/memproxy-goodmem-memories/_count",
            json={"query": {"term": {"space_id": sp.space_id}}},
        )
        return int(res.json()["count"])

    assert records() == 1
    assert http.delete(f"/_plugins/_ml/memory_containers/{sp.space_id}").status_code == 200
    assert records() == 0
    with pytest.raises(gerr.NotFoundError):
        gm.memories.get(id=mem.memory_id)


# --- permissions ----------------------------------------------------------------------------------


def _grant(client: Goodmem, grantee: str, operation: str, selector: str, space_id: str) -> Any:
    """``client`` grants ``grantee`` one operation on one space."""
    return client.access_policy.grants.create(
        audience={"principal_id": grantee},
        rule={
            "operation": operation,
            "selector": selector,
            "assigned_resource": {"kind": "SPACE", "resource_id": space_id},
        },
    )


def test_permissions(gm: Goodmem, alice: User, bob: User, embedder_id: str, proxy_url: str) -> None:
    alice_id, alice_gm, alice_key = alice
    bob_id, bob_gm, _ = bob
    sp = alice_gm.spaces.create(
        name=f"alice-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}]
    )
    assert sp.owner_id == alice_id
    mem = alice_gm.memories.create(space_id=sp.space_id, original_content="alice's secret")
    try:
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.spaces.get(id=sp.space_id)
        with pytest.raises(gerr.NotFoundError):
            bob_gm.spaces.get(id=str(uuid.uuid4()))
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.get(id=mem.memory_id)
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.list(space_id=sp.space_id)
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.create(space_id=sp.space_id, original_content="intrusion")
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.spaces.delete(id=sp.space_id)
        assert sp.space_id not in [s.space_id for s in bob_gm.spaces.list()]
        assert gm.spaces.get(id=sp.space_id).owner_id == alice_id  # root sees everything
        with pytest.raises(gerr.PermissionDeniedError):
            _grant(bob_gm, bob_id, "READ_MEMORY", "DIRECT_MEMBERS_OF", sp.space_id)
        grants = [
            _grant(alice_gm, bob_id, op, sel, sp.space_id)
            for op, sel in (("LIST_MEMORY", "EXACT"), ("READ_MEMORY", "DIRECT_MEMBERS_OF"))
        ]
        listed = alice_gm.access_policy.grants.list(resource_kind="SPACE", resource_id=sp.space_id)
        assert sorted(g.grant_id for g in listed) == sorted(g.grant_id for g in grants)
        assert bob_gm.spaces.get(id=sp.space_id).space_id == sp.space_id
        assert [m.memory_id for m in bob_gm.memories.list(space_id=sp.space_id)] == [mem.memory_id]
        assert (
            bob_gm.memories.get(id=mem.memory_id, include_content=True).original_content == b"alice's secret"
        )
        assert sp.space_id in [s.space_id for s in bob_gm.spaces.list()]
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.create(space_id=sp.space_id, original_content="still no write")
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.delete(id=mem.memory_id)
        for g in grants:
            alice_gm.access_policy.grants.delete(id=g.grant_id)
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.get(id=mem.memory_id)
        # Gen A publicRead (the Gen B SDK cannot send it): every authenticated principal may read.
        cfg = gc.Configuration(host=proxy_url)
        cfg.api_key = {"ApiKeyAuth": alice_key}
        public = gc.SpacesApi(gc.ApiClient(cfg)).update_space(
            id=sp.space_id, update_space_request=gm_models.UpdateSpaceRequest(public_read=True)
        )
        assert public.public_read is True
        assert bob_gm.memories.get(id=mem.memory_id).memory_id == mem.memory_id
        with pytest.raises(gerr.PermissionDeniedError):
            bob_gm.memories.delete(id=mem.memory_id)
    finally:
        alice_gm.spaces.delete(id=sp.space_id)


def test_access_policy_check_predicts_what_the_routes_do(
    gm: Goodmem, alice: User, bob: User, embedder_id: str, proxy_url: str
) -> None:
    """Each answer of ``access_policy.check`` next to what the route itself then does, for a reader with
    grants, the owner and an administrator."""
    alice_id, alice_gm, _ = alice
    bob_id, bob_gm, _ = bob
    sp = alice_gm.spaces.create(
        name=f"check-{uuid.uuid4().hex[:8]}", space_embedders=[{"embedder_id": embedder_id}]
    )
    mem = alice_gm.memories.create(space_id=sp.space_id, original_content="checked")
    try:
        for op, sel in (("LIST_MEMORY", "EXACT"), ("READ_MEMORY", "DIRECT_MEMBERS_OF")):
            _grant(alice_gm, bob_id, op, sel, sp.space_id)
        space, memory = ("SPACE", sp.space_id), ("MEMORY", mem.memory_id)
        cases: list[tuple[str, tuple[str, str | None], bool, bool, bool]] = [
            # operation, target, bob (reader), alice (owner), root (admin)
            ("READ_SPACE", space, True, True, True),
            ("LIST_MEMORY", space, True, True, True),
            ("CREATE_MEMORY", space, False, True, True),
            ("UPDATE_SPACE", space, False, True, True),
            ("DELETE_SPACE", space, False, True, True),
            ("MANAGE_ACCESS", space, False, True, True),
            ("TRANSFER_RESOURCE_OWNERSHIP", space, False, True, True),
            ("READ_MEMORY", memory, True, True, True),
            ("DELETE_MEMORY", memory, False, True, True),
            ("READ_SPACE", ("SPACE", str(uuid.uuid4())), False, False, False),  # none such
            ("READ_MEMORY", ("MEMORY", "not-a-uuid"), False, False, False),
            ("CREATE_SPACE", ("INSTANCE", None), True, True, True),
            ("CREATE_USER", ("INSTANCE", None), False, False, True),
            ("PURGE_BACKGROUND_JOBS", ("INSTANCE", None), False, False, True),
            ("READ_USER", ("USER", alice_id), False, True, True),
            ("UPDATE_USER", ("USER", bob_id), True, False, True),
            ("DELETE_USER", ("USER", bob_id), False, False, True),
            ("READ_EMBEDDER", ("EMBEDDER", embedder_id), True, True, True),
            ("EXECUTE_EMBEDDER", ("EMBEDDER", embedder_id), True, True, True),
            ("DELETE_EMBEDDER", ("EMBEDDER", embedder_id), False, False, False),  # a start-up model
            ("READ_EMBEDDER_CREDENTIALS", ("EMBEDDER", embedder_id), False, False, False),
            ("READ_SERVICE_IDENTITY", ("SERVICE_IDENTITY", str(uuid.uuid4())), False, False, False),
        ]
        checks = [
            {"operation": op, "target": {"kind": kind, **({"resource_id": rid} if rid else {})}}
            for op, (kind, rid), *_ in cases
        ]
        answers = {
            who: [r.allowed for r in client.access_policy.check(checks=checks).results]
            for who, client in (("bob", bob_gm), ("alice", alice_gm), ("root", gm))
        }
        for i, (op, target, *expected) in enumerate(cases):
            got = [answers[who][i] for who in ("bob", "alice", "root")]
            assert got == expected, (op, target, got)

        # The routes agree with bob's answers.
        assert bob_gm.spaces.get(id=sp.space_id).space_id == sp.space_id
        assert [m.memory_id for m in bob_gm.memories.list(space_id=sp.space_id)] == [mem.memory_id]
        assert bob_gm.memories.get(id=mem.memory_id).memory_id == mem.memory_id
        assert bob_gm.users.get(id=bob_id).user_id == bob_id
        assert bob_gm.embedders.get(id=embedder_id).embedder_id == embedder_id
        for denied in (
            lambda: bob_gm.memories.create(space_id=sp.space_id, original_content="no"),
            lambda: bob_gm.spaces.update(id=sp.space_id, request={"name": "no"}),
            lambda: bob_gm.spaces.delete(id=sp.space_id),
            lambda: bob_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": bob_id}),
            lambda: bob_gm.memories.delete(id=mem.memory_id),
            lambda: bob_gm.users.get(id=alice_id),
            lambda: bob_gm.users.create(email=f"no-{uuid.uuid4().hex[:6]}@example.com"),
        ):
            with pytest.raises(gerr.PermissionDeniedError):
                denied()
        # ... and so do the owner's and the administrator's.
        assert alice_gm.memories.delete(id=mem.memory_id) is None

        bad_bodies: list[dict[str, Any]] = [
            {"checks": []},
            {"checks": [checks[0]] * 51},
            {"checks": [{"operation": "FLY", "target": {"kind": "INSTANCE"}}]},
            {"checks": [{"operation": "LIST_RETRIEVE_MEMORY_LOG_POLICY", "target": {"kind": "INSTANCE"}}]},
            {"checks": [{"operation": "READ_SPACE", "target": {"kind": "SPACE"}}]},
            {"checks": [{"operation": "READ_SPACE", "target": {"kind": "GALAXY", "resourceId": "x"}}]},
        ]
        with httpx.Client(base_url=proxy_url, headers={"x-api-key": bob[2]}) as http_bob:
            for body in bad_bodies:
                bad = http_bob.post("/v1/access-policy:check", json=body)
                assert bad.status_code == 400, (body, bad.text)
    finally:
        gm.spaces.delete(id=sp.space_id)


def test_space_ownership_transfer(gm: Goodmem, alice: User, bob: User, embedder_id: str) -> None:
    """The owner or an administrator gives a space away: memories and grants stay, access moves."""
    alice_id, alice_gm, _ = alice
    bob_id, bob_gm, _ = bob
    name = f"handover-{uuid.uuid4().hex[:8]}"
    sp = alice_gm.spaces.create(name=name, space_embedders=[{"embedder_id": embedder_id}])
    mem = alice_gm.memories.create(space_id=sp.space_id, original_content="handed over")
    clash = bob_gm.spaces.create(name=name, space_embedders=[{"embedder_id": embedder_id}])
    gone = gm.users.create(email=f"gone-{uuid.uuid4().hex[:8]}@example.com")
    gm.users.delete(id=gone.user_id)
    try:
        with pytest.raises(gerr.PermissionDeniedError):  # bob cannot even read it
            bob_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": bob_id})
        grant = _grant(alice_gm, bob_id, "UPDATE_SPACE", "EXACT", sp.space_id)
        bob_gm.spaces.update(id=sp.space_id, request={"merge_labels": {"by": "bob"}})
        with pytest.raises(gerr.PermissionDeniedError):  # updating is not owning
            bob_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": bob_id})
        with pytest.raises(gerr.ConflictError):  # bob has a space of that name already
            alice_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": bob_id})
        for missing in (str(uuid.uuid4()), gone.user_id):
            with pytest.raises(gerr.NotFoundError):
                alice_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": missing})
        # Nothing else can be given to a deleted user either: spaces, keys and models share the rule.
        with pytest.raises(gerr.NotFoundError):
            gm.spaces.create(name=name, space_embedders=[{"embedder_id": embedder_id}], owner_id=gone.user_id)
        with pytest.raises(gerr.NotFoundError):
            gm.apikeys.create(subject_principal_id=gone.user_id)
        with pytest.raises(gerr.NotFoundError):
            gm.rerankers.create(
                display_name="for-gone",
                provider_type="TEI",
                endpoint_url="http://127.0.0.1:9",
                model_identifier="gone",
                owner_id=gone.user_id,
            )
        bob_gm.spaces.delete(id=clash.space_id)

        moved = alice_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": bob_id}).space
        assert (moved.owner_id, moved.updated_by_id, moved.created_by_id) == (bob_id, alice_id, alice_id)
        assert moved.labels == {"by": "bob"} and moved.name == name
        assert bob_gm.memories.get(id=mem.memory_id, include_content=True).original_content == b"handed over"
        assert sp.space_id in [s.space_id for s in bob_gm.spaces.list(owner_id=bob_id)]
        with pytest.raises(gerr.PermissionDeniedError):  # alice kept no right of her own
            alice_gm.memories.get(id=mem.memory_id)
        with pytest.raises(gerr.PermissionDeniedError):
            alice_gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": alice_id})
        assert [
            g.grant_id for g in gm.access_policy.grants.list(resource_kind="SPACE", resource_id=sp.space_id)
        ] == [grant.grant_id]

        back = gm.spaces.transfer_ownership(id=sp.space_id, request={"new_owner_id": alice_id}).space
        assert back.owner_id == alice_id
        assert alice_gm.memories.get(id=mem.memory_id).memory_id == mem.memory_id
    finally:
        gm.spaces.delete(id=sp.space_id)
        with contextlib.suppress(gerr.NotFoundError):
            gm.spaces.delete(id=clash.space_id)


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/spaces", "{not json", 400),
        ("POST", "/v1/spaces", {"spaceEmbedders": [{"embedderId": "x"}]}, 400),
        ("POST", "/v1/spaces", {"name": "n", "spaceEmbedders": []}, 400),
        ("POST", "/v1/spaces", {"name": "n", "spaceEmbedders": [{"embedderId": str(uuid.uuid4())}]}, 400),
        ("POST", "/v1/spaces", {"name": "n", "spaceEmbedders": "EMB", "spaceId": "not-a-uuid"}, 400),
        (
            "POST",
            "/v1/spaces",
            {"name": "n", "spaceEmbedders": "EMB", "defaultChunkingConfig": {"x": {}}},
            400,
        ),
        ("POST", "/v1/spaces", {"name": "n", "spaceEmbedders": "EMB", "publicRead": "yes"}, 400),
        ("GET", "/v1/spaces?sortBy=size", None, 400),
        ("GET", "/v1/spaces?maxResults=abc", None, 400),
        ("GET", "/v1/spaces?nextToken=%%%", None, 400),
        ("GET", "/v1/spaces/bad%20id", None, 400),
        ("POST", "/v1/memories", {"spaceId": "SPACE"}, 400),
        (
            "POST",
            "/v1/memories",
            {"spaceId": "SPACE", "originalContent": "a", "originalContentB64": "YQ=="},
            400,
        ),
        ("POST", "/v1/memories", {"spaceId": "SPACE", "originalContent": "a", "metadata": "x"}, 400),
        ("POST", "/v1/memories", {"spaceId": str(uuid.uuid4()), "originalContent": "a"}, 404),
        ("GET", "/v1/memories/not-a-uuid", None, 400),
        ("GET", f"/v1/memories/{uuid.uuid4()}", None, 404),
        ("GET", "/v1/spaces/SPACE/memories?sortBy=size", None, 400),
        ("GET", "/v1/spaces/SPACE/memories?statusFilter=DONE", None, 400),
        ("POST", "/v1/memories:batchCreate", {"requests": []}, 400),
        ("POST", "/v1/memories:batchDelete", {"requests": [{}]}, 207),
        ("POST", "/v1/apikeys", {"labels": {"k": 5}}, 400),
        ("PUT", "/v1/spaces/SPACE", {"replaceLabels": {}, "mergeLabels": {}}, 400),
        ("GET", "/v1/no-such-endpoint", None, 404),
    ],
)
def test_bad_input(
    http: httpx.Client, space: Any, embedder_id: str, method: str, path: str, body: Any, status: int
) -> None:
    path = path.replace("SPACE", space.space_id)
    if isinstance(body, dict):
        body = {k: ([{"embedderId": embedder_id}] if v == "EMB" else v) for k, v in body.items()}
        body = {k: (space.space_id if v == "SPACE" else v) for k, v in body.items()}
        resp = http.request(method, path, json=body)
    else:
        resp = http.request(method, path, content=body, headers={"content-type": "application/json"})
    assert resp.status_code == status, resp.text
    payload = resp.json()
    if status >= 400:
        assert set(payload) >= {"error", "status"} and payload["status"] == status and payload["error"]
    else:
        assert payload["results"][0]["success"] is False and payload["results"][0]["error"]["code"] == 400
