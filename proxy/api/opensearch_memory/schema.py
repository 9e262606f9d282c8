"""The ml-commons agentic-memory API's OpenAPI description (proxy.api.openapi): request bodies and answers
of the memory-container routes as pydantic models, and the table of their operations.

The handlers read bodies leniently, as ml-commons' parsers do (:mod:`.lenient`: a number may come as a
string, unknown keys are dropped); these models describe the documented shapes. Answers that relay the
node's own (write results, search responses) name the fields memproxy relies on and allow the rest.
tests/test_openapi.py checks the answers against these models with schemathesis.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from proxy.api.openapi import Api, OpenSearchError, Operation
from proxy.core.search import MAX_K

__all__ = ["MEMORY_API"]

PREFIX = "/_plugins/_ml/memory_containers"
_C = PREFIX + "/{memory_container_id}"
_LT = _C + "/memories/long-term"

MemoryType = Literal["sessions", "working", "long-term", "history"]
StringMap = dict[str, str]


class _In(BaseModel):
    """A request body. The handlers drop keys they do not know; the document names only the ones they read
    (``additionalProperties: false``), which is what a client should send."""

    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


# --- containers ------------------------------------------------------------------------------------------


class Strategy(_In):
    type: Literal["SEMANTIC", "USER_PREFERENCE", "SUMMARY"] | None = None
    id: str | None = None
    enabled: bool | None = None
    namespace: list[str] | None = None
    configuration: dict[str, Any] | None = None


class Configuration(_In):
    embedding_model_type: Literal["TEXT_EMBEDDING", "SPARSE_ENCODING"] | None = None
    embedding_model_id: str | None = None
    embedding_dimension: int | None = None
    llm_id: str | None = None
    index_prefix: str | None = None
    tenant_id: str | None = None
    max_infer_size: int | None = None
    disable_history: bool | None = None
    disable_session: bool | None = None
    use_system_index: bool | None = None
    strategies: list[Strategy] | None = None
    index_settings: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    retention_policy: dict[str, Any] | None = Field(
        None,
        description="ml-commons 3.8: sessions / long-term / history, each retention_days and/or max_count",
    )


class NewContainer(_In):
    name: str
    description: str | None = None
    configuration: Configuration | None = None
    backend_roles: list[str] | None = None
    memory_container_id: str | None = Field(
        None,
        description="the id to create it under (ml-commons 3.9): letters, digits, `_` and `-`, starting "
        "with a letter or digit, at most 512 bytes; 409 when taken",
    )


class ContainerUpdate(_In):
    name: str | None = None
    description: str | None = None
    configuration: Configuration | None = None
    backend_roles: list[str] | None = None


class ContainerDelete(_In):
    delete_all_memories: bool | None = None
    delete_memories: list[MemoryType] | None = None


class ContainerDeleteQuery(_In):
    delete_all_memories: bool | None = None
    delete_memories: str | None = Field(None, description="memory types, comma separated")


class Created(_Out):
    memory_container_id: str
    status: str


class Container(_Out):
    name: str | None = None
    description: str | None = None
    owner: dict[str, Any] | None = None
    tenant_id: str | None = None
    created_time: int | None = None
    last_updated_time: int | None = None
    configuration: dict[str, Any] | None = None
    backend_roles: list[str] | None = None


class WriteResult(_Out):
    """The node's answer to an index, update or delete of one document."""

    index: str = Field(alias="_index")
    id: str = Field(alias="_id")
    result: str


class SearchHits(_Out):
    hits: list[dict[str, Any]]
    total: dict[str, Any] | None = None
    max_score: float | None = None


class SearchResponse(_Out):
    """A search response, as the node writes it (hits without versions for the memory searches)."""

    took: int
    timed_out: bool
    hits: SearchHits


class SearchBody(_In):
    """Query DSL for the container's own index (``query``, ``size``, ``sort``, ...)."""

    model_config = ConfigDict(extra="allow")
    query: dict[str, Any] | None = None
    size: int | None = None


# --- memories --------------------------------------------------------------------------------------------


class Message(_In):
    role: str
    content: list[dict[str, Any]]


class NewMemory(_In):
    messages: list[Message] | None = None
    payload_type: Literal["conversational", "data", "CONVERSATIONAL", "DATA"] | None = None
    structured_data: dict[str, Any] | None = None
    structured_data_blob: dict[str, Any] | None = None
    binary_data: str | None = None
    message_id: int | None = None
    checkpoint_id: str | None = None
    namespace: StringMap | None = None
    metadata: StringMap | None = None
    tags: StringMap | None = None
    infer: bool | None = None
    parameters: dict[str, Any] | None = None
    memory_container_id: str | None = Field(None, description="overrides the path's, as in ml-commons")
    wait_for_inference: bool | None = Field(None, description="memproxy: answer after the extraction ran")


class AddedMemory(_Out):
    working_memory_id: str
    session_id: str | None = None
    inference: dict[str, Any] | None = None


class WaitQuery(_In):
    wait_for_inference: bool | None = None


class NewSession(_In):
    session_id: str | None = None
    summary: str | None = None
    metadata: dict[str, Any] | None = None
    agents: dict[str, Any] | None = None
    additional_info: dict[str, Any] | None = None
    namespace: StringMap | None = None


class SessionCreated(_Out):
    session_id: str
    status: str


class StoredMemory(_Out):
    """A stored memory as ml-commons' GET renders its type: the type's keys, nulls and empties left out."""


class MemoryUpdate(_In):
    """The fields the memory's type lets an update change (long-term: ``memory``, ``tags``, ...)."""

    model_config = ConfigDict(extra="allow")
    memory: str | None = None
    tags: StringMap | None = None
    namespace: StringMap | None = None
    metadata: dict[str, Any] | None = None
    pinned: bool | None = Field(None, description="ml-commons 3.8: sessions and long-term, with retention on")


class DeleteByQuery(_In):
    query: dict[str, Any]


class DeleteByQueryResult(_Out):
    deleted: int
    updated: int
    created: int


class EraseRequest(_In):
    user_id: str = Field(min_length=1, max_length=512, description="the namespace user_id to erase")


class ErasedIndex(_Out):
    index: str
    deleted: int
    ids: list[str] = Field(description="the first 100 ids deleted, where known")
    ids_complete: bool


class SearchedIndex(_Out):
    index: str
    found: int


class EraseVerification(_Out):
    verified: bool
    rounds: int
    searched: list[SearchedIndex]


class EraseReceipt(_Out):
    """What an erasure deleted per index, and the searches after it (409: they still found documents)."""

    user_id: str
    memory_container_ids: list[str]
    erased_at: int
    indices: list[ErasedIndex]
    total_deleted: int
    verification: EraseVerification


class EraseQuery(_In):
    wait_for_completion: bool | None = Field(
        None, description="false: answer at once with the id of a durable job that erases (default true)"
    )


class ErasureStarted(_Out):
    job_id: str
    state: str


class EraseAnswer(RootModel[EraseReceipt | ErasureStarted]):
    """The receipt, or (``wait_for_completion=false``) the erasure job's id."""


class ErasureJob(_Out):
    job_id: str
    state: Literal["PENDING", "RUNNING", "COMPLETED", "FAILED"]
    attempts: int
    created_at: int
    finished_at: int | None = None
    last_error: str | None = None
    receipt: EraseReceipt | None = Field(None, description="once the job has completed")


class Search(_In):
    query: str = Field(min_length=1)
    k: int | None = Field(None, ge=1, le=MAX_K)
    namespace: StringMap | None = None
    tags: StringMap | None = None
    filter: dict[str, Any] | None = Field(None, description="Query DSL")
    min_score: float | None = None
    ef_search: int | None = Field(None, ge=1, description="memproxy: the HNSW candidate list")


class HybridSearch(Search):
    bm25_weight: float | None = Field(None, ge=0, le=1)
    neural_weight: float | None = Field(None, ge=0, le=1)


class LongTermMemory(_In):
    memory: str = Field(min_length=1)
    strategy_type: Literal["SEMANTIC", "USER_PREFERENCE", "SUMMARY"] | None = None
    strategy_id: str | None = None
    namespace: StringMap | None = None
    tags: StringMap | None = None
    metadata: dict[str, Any] | None = None
    pinned: bool | None = Field(None, description="ml-commons 3.8: never evicted; needs retention on")


class LongTermBulk(_In):
    memories: list[LongTermMemory] = Field(min_length=1, max_length=10_000)


class LongTermAdded(_Out):
    long_term_memory_id: str
    status: str


class LongTermBulkAdded(_Out):
    long_term_memory_ids: list[str]
    status: str


class Inference(_Out):
    working_memory_id: str
    job_id: str
    state: str
    attempts: int


class RetentionCounts(_Out):
    total: int
    by_reason: dict[str, int]


class RetentionWouldDelete(_Out):
    sessions: RetentionCounts
    long_term: RetentionCounts
    history: RetentionCounts
    working_memory: RetentionCounts


class RetentionDryRun(_Out):
    container_id: str
    evaluated_at: int
    policy_source: Literal["container", "cluster_default", "opted_out", "none"]
    effective_policy: dict[str, dict[str, int]]
    would_delete: RetentionWouldDelete
    pinned_would_skip: int
    warnings: list[str]


class RetentionDryRunAll(_Out):
    evaluated_at: int
    containers: list[RetentionDryRun]


class RetentionExecuted(_Out):
    status: Literal["triggered", "already_running", "retention_disabled"]


class SwitchEmbedding(_In):
    embedding_model_id: str = Field(description="the model to re-embed the container's memories with")
    embedding_dimension: int | None = Field(None, description="checked against the model's, when given")
    grace_period_s: float | None = Field(
        None, description="how long the old index is kept after the switch (default 300, at most 30 days)"
    )
    batch_size: int | None = Field(None, description="memories re-embedded per batch (1-2000, default 256)")


class SwitchCreated(_Out):
    task_id: str
    status: str


class SwitchProgress(_Out):
    task_id: str
    state: str
    stage: str | None = None
    switch_state: str
    copied: int
    total: int
    eta_s: float | None = None
    attempts: int
    errors: list[str]


_TYPE = {"memory_type": {"type": "string", "enum": ["sessions", "working", "long-term", "history"]}}

_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("POST", PREFIX + "/_create"): Operation("Create a memory container", {200: Created}, body=NewContainer),
    ("GET", PREFIX + "/_search"): Operation(
        "Search the containers the caller may see", {200: SearchResponse}, body=SearchBody
    ),
    ("POST", PREFIX + "/_search"): Operation(
        "Search the containers the caller may see", {200: SearchResponse}, body=SearchBody
    ),
    ("POST", PREFIX + "/_retention/_dry_run"): Operation(
        "What retention would delete in every container (an administrator)",
        {200: RetentionDryRunAll},
        body_required=False,
    ),
    ("POST", PREFIX + "/_retention/_execute"): Operation(
        "Start a retention run now (an administrator)", {200: RetentionExecuted}, body_required=False
    ),
    ("POST", _C + "/_retention/_dry_run"): Operation(
        "What retention would delete in this container", {200: RetentionDryRun}, body_required=False
    ),
    ("GET", _C): Operation("A memory container", {200: Container}),
    ("PUT", _C): Operation("Update a memory container", {200: WriteResult}, body=ContainerUpdate),
    ("DELETE", _C): Operation(
        "Delete a memory container (and, if asked, its memories)",
        {200: WriteResult},
        body=ContainerDelete,
        body_required=False,
        query=ContainerDeleteQuery,
    ),
    ("POST", PREFIX + "/_memproxy_erase"): Operation(
        "memproxy: erase a namespace user_id from every container whose memories the caller may delete",
        {200: EraseAnswer, 409: EraseReceipt},
        body=EraseRequest,
        query=EraseQuery,
    ),
    ("GET", PREFIX + "/_memproxy_erase/{job_id}"): Operation(
        "memproxy: an erasure job (wait_for_completion=false) and its receipt", {200: ErasureJob}
    ),
    ("POST", _C + "/_memproxy_erase"): Operation(
        "memproxy: erase a namespace user_id from this container, with a receipt",
        {200: EraseAnswer, 409: EraseReceipt},
        body=EraseRequest,
        query=EraseQuery,
    ),
    ("POST", _C + "/_memproxy_switch_embedding"): Operation(
        "memproxy: switch the container's embedding model (a durable job)",
        {200: SwitchCreated},
        body=SwitchEmbedding,
    ),
    ("GET", _C + "/_memproxy_switch_embedding"): Operation(
        "memproxy: the progress of the container's latest embedding switch", {200: SwitchProgress}
    ),
    ("DELETE", _C + "/_memproxy_switch_embedding"): Operation(
        "memproxy: cancel an embedding switch before it switched", {200: SwitchCreated}
    ),
    ("POST", _C + "/memories"): Operation(
        "Add a working memory (infer: extract long-term facts)",
        {200: AddedMemory},
        body=NewMemory,
        query=WaitQuery,
    ),
    ("POST", _C + "/memories/sessions"): Operation(
        "Create a session", {200: SessionCreated}, body=NewSession
    ),
    ("GET", _LT + "/_semantic_search"): Operation(
        "Semantic search of long-term memories", {200: SearchResponse}, body=Search
    ),
    ("POST", _LT + "/_semantic_search"): Operation(
        "Semantic search of long-term memories", {200: SearchResponse}, body=Search
    ),
    ("GET", _LT + "/_hybrid_search"): Operation(
        "Hybrid (BM25 + vector) search of long-term memories", {200: SearchResponse}, body=HybridSearch
    ),
    ("POST", _LT + "/_hybrid_search"): Operation(
        "Hybrid (BM25 + vector) search of long-term memories", {200: SearchResponse}, body=HybridSearch
    ),
    ("POST", _LT + "/_memproxy_add"): Operation(
        "memproxy: write one long-term memory without an LLM", {200: LongTermAdded}, body=LongTermMemory
    ),
    ("POST", _LT + "/_memproxy_bulk"): Operation(
        "memproxy: write long-term memories, all or nothing", {200: LongTermBulkAdded}, body=LongTermBulk
    ),
    ("GET", _C + "/memories/working/{working_memory_id}/_memproxy_inference"): Operation(
        "memproxy: the extraction job of an infer add", {200: Inference}
    ),
    ("GET", _C + "/memories/{memory_type}/_search"): Operation(
        "Search memories of one type", {200: SearchResponse}, body=SearchBody, path_params=_TYPE
    ),
    ("POST", _C + "/memories/{memory_type}/_search"): Operation(
        "Search memories of one type", {200: SearchResponse}, body=SearchBody, path_params=_TYPE
    ),
    ("POST", _C + "/memories/{memory_type}/_delete_by_query"): Operation(
        "Delete memories of one type by query",
        {200: DeleteByQueryResult},
        body=DeleteByQuery,
        path_params=_TYPE,
    ),
    ("GET", _C + "/memories/{memory_type}/{memory_id}"): Operation(
        "A memory", {200: StoredMemory}, path_params=_TYPE
    ),
    ("PUT", _C + "/memories/{memory_type}/{memory_id}"): Operation(
        "Update a memory", {200: WriteResult}, body=MemoryUpdate, path_params=_TYPE
    ),
    ("DELETE", _C + "/memories/{memory_type}/{memory_id}"): Operation(
        "Delete a memory", {200: WriteResult}, path_params=_TYPE
    ),
}

MEMORY_API = Api(
    tag="ml-commons agentic memory",
    error=OpenSearchError,
    error_statuses=(400, 401, 403, 404, 405, 409, 413, 429, 503),
    operations=_OPERATIONS,
)
