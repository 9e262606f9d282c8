"""The GoodMem API's OpenAPI description (proxy.api.openapi): the wire shapes of its request bodies, query
parameters and answers as pydantic models, and the table of its operations.

These models describe; the handlers read bodies with their own wire models (``*_wire.py``, the modules of
each noun), whose validators give GoodMem's messages, and render answers with :mod:`.render`.
tests/test_openapi.py holds the two together: a schemathesis run checks every answer against these models.
Answers allow fields beyond the ones named (both client generations ignore unknown fields).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from proxy.api.goodmem.retrieve import TIMEOUT_HEADER
from proxy.api.goodmem.streaming import STREAM_TERMINAL_HEADER
from proxy.api.openapi import Api, Operation, Raw
from proxy.core.goodmem import ping, providers
from proxy.core.goodmem.apikeys import LIFECYCLE_STATES
from proxy.core.goodmem.checks import OPERATIONS, RESOURCE_KINDS, UNCHECKABLE
from proxy.core.goodmem.grants import GRANTABLE
from proxy.core.goodmem.memory_list import SORT_FIELDS, STATUSES
from proxy.core.goodmem.retrieve.request import CHAT_POST_PROCESSOR

__all__ = ["GOODMEM_API"]

Labels = dict[str, str]
Status = Literal["PENDING", "PROCESSING", "COMPLETED", "FAILED"]
assert set(STATUSES) == set(Status.__args__)  # type: ignore[attr-defined]


def _enum(values: Iterable[str], *, optional: bool = False) -> Any:
    """A string field that takes one of ``values`` (the service's own table, so the two cannot drift)."""
    extra: dict[str, Any] = {"enum": list(values)}
    return Field(None, json_schema_extra=extra) if optional else Field(json_schema_extra=extra)


class _In(BaseModel):
    """A request body. The handlers ignore fields they do not know; the document names only the ones they
    read (``additionalProperties: false``), which is what a client should send."""

    model_config = ConfigDict(extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class GoodMemError(_Out):
    """Every GoodMem error: the message and the HTTP status (proxy.api.errors.goodmem_error_body)."""

    error: str
    status: int


# --- system ----------------------------------------------------------------------------------------------


class SystemInfo(_Out):
    version: str
    major: int
    minor: int
    patch: int
    dirty: bool
    capabilities: dict[str, str]


class SystemInit(_Out):
    alreadyInitialized: bool
    message: str
    rootApiKey: str | None = None
    userId: str | None = None


class Instance(_Out):
    instanceId: str
    ownerId: str
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str


# --- users -----------------------------------------------------------------------------------------------


class User(_Out):
    userId: str
    email: str
    displayName: str
    labels: Labels
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str
    username: str | None = None
    deletedAt: int | None = None
    deletedById: str | None = None


class UserList(_Out):
    users: list[User]
    nextToken: str | None = None


_EMAIL = r"^[^\s@]+@[^\s@]+$"


class NewUser(_In):
    email: str = Field(max_length=320, pattern=_EMAIL)
    userId: UUID | None = None
    username: str | None = Field(None, min_length=1, max_length=255)
    displayName: str | None = Field(None, max_length=255)
    labels: Labels | None = None


class UserUpdate(_In):
    email: str | None = Field(None, max_length=320, pattern=_EMAIL)
    username: str | None = None
    displayName: str | None = None
    replaceLabels: Labels | None = None
    mergeLabels: Labels | None = None


class Paging(_In):
    maxResults: int | None = None
    nextToken: str | None = None


class UserQuery(_In):
    includeDeleted: bool | None = None


# --- API keys --------------------------------------------------------------------------------------------


class ApiKey(_Out):
    apiKeyId: str
    userId: str
    subjectPrincipalId: str
    ownerPrincipalId: str
    authorityMode: Literal["INHERIT_SUBJECT"]
    ceiling: list[Any]
    ceilingOmitted: bool
    keyPrefix: str
    status: Literal["ACTIVE", "INACTIVE"]
    lifecycleState: str = _enum(LIFECYCLE_STATES)
    labels: Labels
    validFrom: int
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str
    expiresAt: int | None = None
    lastUsedAt: int | None = None
    revokedAt: int | None = None
    revokedById: str | None = None


class IssuedApiKey(_Out):
    apiKeyMetadata: ApiKey
    rawApiKey: str


class ApiKeyList(_Out):
    keys: list[ApiKey]
    nextToken: str | None = None


class NewApiKey(_In):
    labels: Labels | None = None
    expiresAt: int | None = Field(None, description="milliseconds since the epoch, in the future")
    validFrom: int | None = Field(None, description="milliseconds since the epoch, before expiresAt")
    authorityMode: Literal["INHERIT_SUBJECT", "AUTHORITY_MODE_UNSPECIFIED"] | None = None
    ceiling: list[Any] | None = Field(None, description="must be empty: only INHERIT_SUBJECT keys exist")
    subjectPrincipalId: UUID | None = None
    apiKeyId: UUID | None = None


class ApiKeyUpdate(_In):
    status: Literal["ACTIVE", "INACTIVE", "STATUS_UNSPECIFIED"] | None = None
    replaceLabels: Labels | None = None
    mergeLabels: Labels | None = None


class ApiKeyQuery(Paging):
    subjectPrincipalId: UUID | None = None
    ownerPrincipalId: UUID | None = None
    lifecycleState: str | None = _enum(LIFECYCLE_STATES, optional=True)


# --- spaces ----------------------------------------------------------------------------------------------


class SpaceEmbedder(_Out):
    spaceId: str
    embedderId: str
    defaultRetrievalWeight: float
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str


class Space(_Out):
    spaceId: str
    name: str
    labels: Labels
    spaceEmbedders: list[SpaceEmbedder]
    createdAt: int
    updatedAt: int
    ownerId: str
    createdById: str
    updatedById: str
    publicRead: bool
    defaultChunkingConfig: dict[str, Any]


class SpaceList(_Out):
    spaces: list[Space]
    nextToken: str | None = None


class SpaceEmbedderIn(_In):
    embedderId: str = Field(min_length=1)
    defaultRetrievalWeight: float | None = Field(None, ge=0)


class NewSpace(_In):
    name: str = Field(min_length=1, max_length=255)
    spaceEmbedders: list[SpaceEmbedderIn] = Field(min_length=1)
    labels: Labels | None = None
    defaultChunkingConfig: dict[str, Any] | None = Field(
        None, description="GoodMem's ChunkingConfiguration (none, recursive or sentence)"
    )
    publicRead: bool | None = None
    ownerId: UUID | None = None
    spaceId: UUID | None = None


class SpaceUpdate(_In):
    name: str | None = None
    replaceLabels: Labels | None = None
    mergeLabels: Labels | None = None
    publicRead: bool | None = None
    ownerId: UUID | None = None
    defaultChunkingConfig: dict[str, Any] | None = None
    spaceEmbedders: list[SpaceEmbedderIn] | None = Field(None, description="immutable: only the same list")


class CheckTarget(_In):
    kind: str = _enum(RESOURCE_KINDS)
    resourceId: str | None = Field(None, description="required except for INSTANCE")


class AccessCheckIn(_In):
    operation: str = _enum(sorted(OPERATIONS - UNCHECKABLE))
    target: CheckTarget


class AccessChecks(_In):
    checks: list[AccessCheckIn] = Field(min_length=1, max_length=50)


class CheckResult(_Out):
    allowed: bool


class CheckResults(_Out):
    results: list[CheckResult]


class PurgeJobs(_In):
    olderThan: str = Field(description="ISO-8601 instant; jobs that ended before it are purged")
    statuses: (
        list[
            Literal[
                "BACKGROUND_JOB_SUCCEEDED",
                "BACKGROUND_JOB_FAILED",
                "BACKGROUND_JOB_CANCELED",
                "SUCCEEDED",
                "FAILED",
                "CANCELED",
            ]
        ]
        | None
    ) = None
    dryRun: bool | None = None
    limit: int | None = Field(None, ge=0, description="0: no limit")


class PurgedJobs(_Out):
    jobsPurged: int
    attemptsPurged: int
    referencesPurged: int
    dryRun: bool


class UserErasure(_In):
    deleteUser: bool | None = Field(
        None, description="also delete the account: its API keys, grants to it, its personal fields (admins)"
    )


class ErasedIndex(_Out):
    index: str
    deleted: int
    ids: list[str]
    idsComplete: bool


class SearchedIndex(_Out):
    index: str
    found: int


class ErasureVerification(_Out):
    verified: bool
    rounds: int
    searched: list[SearchedIndex]


class UserErasureReceipt(_Out):
    """What erasing a user's data deleted per index, and the searches after it (409: they still found)."""

    userId: str
    spaceIds: list[str]
    erasedAt: int
    indices: list[ErasedIndex]
    totalDeleted: int
    userDeleted: bool
    verification: ErasureVerification


class UserErasureQuery(_In):
    waitForCompletion: bool | None = Field(
        None, description="false: answer 202 with the id of a durable job that erases (default true)"
    )


class UserErasureStarted(_Out):
    jobId: str
    status: str


class UserErasureJob(_Out):
    jobId: str
    status: str
    attempts: int
    createdAt: int
    finishedAt: int | None = None
    lastError: str | None = None
    receipt: UserErasureReceipt | None = Field(None, description="once the job has completed")


class TransferOwnership(_In):
    newOwnerId: UUID


class TransferredSpace(_Out):
    space: Space


class SwitchEmbedder(_In):
    embedderId: str = Field(description="memproxy: the embedder to re-embed the space's memories with")
    gracePeriodSeconds: float | None = Field(
        None, description="how long the old index is kept after the switch (default 300, at most 30 days)"
    )


class EmbedderSwitchStarted(_Out):
    jobId: str
    status: str


class EmbedderSwitch(_Out):
    jobId: str
    state: str
    stage: str | None = None
    switchState: str
    embedderId: str | None = None
    copied: int
    total: int
    etaSeconds: float | None = None
    attempts: int
    errors: list[str]


class SpaceQuery(Paging):
    ownerId: str | None = None
    nameFilter: str | None = None
    sortBy: Literal["created_time", "updated_time", "name"] | None = None
    sortOrder: Literal["ASCENDING", "DESCENDING"] | None = None


# --- memories --------------------------------------------------------------------------------------------


class Memory(_Out):
    memoryId: str
    spaceId: str
    contentType: str
    processingStatus: Status
    pageImageStatus: str
    pageImageCount: int
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str
    metadata: dict[str, Any]
    originalContentLength: int | None = None
    originalContentSha256: str | None = None
    originalContentRef: str | None = None
    originalContent: str | None = Field(None, description="base64, with includeContent")
    chunkingConfig: dict[str, Any] | None = None
    processingHistory: dict[str, Any] | None = Field(
        None, description="the memory's background job (latestJob, attempts), with includeProcessingHistory"
    )


class MemoryList(_Out):
    memories: list[Memory]
    nextToken: str | None = None


class NewMemory(_In):
    spaceId: str
    originalContent: str | None = Field(
        None, min_length=1, description="the text (exactly one of the two contents)"
    )
    originalContentB64: str | None = Field(None, description="the bytes, base64 (needs contentType)")
    contentType: str | None = None
    metadata: dict[str, Any] | None = None
    originalContentRef: str | None = None
    memoryId: UUID | None = None
    chunkingConfig: dict[str, Any] | None = None
    extractPageImages: bool | None = None


class BatchCreate(_In):
    requests: list[NewMemory] = Field(min_length=1)


class BatchGet(_In):
    memoryIds: list[str] = Field(min_length=1)
    includeContent: bool | None = None


class DeleteSelector(_In):
    spaceId: str
    filter: str | None = None
    statusFilter: Status | None = None


class DeleteItem(_In):
    memoryId: str | None = None
    filterSelector: DeleteSelector | None = None


class BatchDelete(_In):
    requests: list[DeleteItem] = Field(min_length=1)


class ItemError(_Out):
    code: int
    message: str


class BatchItem(_Out):
    success: bool
    memoryId: str | None = None
    memory: Memory | None = None
    error: ItemError | None = None


class BatchResults(_Out):
    results: list[BatchItem]


class DeleteResult(_Out):
    success: bool
    requestIndex: int
    deletedCount: int
    memoryId: str | None = None
    error: ItemError | None = None


class BatchDeleteResults(_Out):
    results: list[DeleteResult]
    totalDeleted: int


class PageImage(_Out):
    memoryId: str
    pageIndex: int
    dpi: int
    contentType: str
    imageContentLength: int | None = None
    imageContentSha256: str | None = None
    createdAt: int
    updatedAt: int
    createdById: str
    updatedById: str


class PageImages(_Out):
    pageImages: list[PageImage]
    nextToken: str | None = None


class PageQuery(Paging):
    startPageIndex: int | None = Field(None, ge=0)
    endPageIndex: int | None = Field(None, ge=0)
    dpi: int | None = Field(None, gt=0)
    contentType: str | None = None


class RenditionQuery(_In):
    dpi: int | None = Field(None, gt=0)
    contentType: str | None = None


class OcrRequest(_In):
    content: str = Field(description="the document's bytes, base64 (PDF, PNG, JPEG, TIFF, BMP)")
    format: Literal["AUTO", "PDF", "TIFF", "PNG", "JPEG", "BMP"] | None = None
    includeRawJson: bool | None = None
    includeMarkdown: bool | None = None
    startPage: int | None = Field(None, ge=0)
    endPage: int | None = Field(None, ge=0)


class OcrResponse(_Out):
    detectedFormat: str
    pageCount: int
    pages: list[dict[str, Any]]
    timings: dict[str, Any]


SortBy = Literal["created_at", "updated_at", "content_type", "processing_status"]
assert set(SORT_FIELDS) == set(SortBy.__args__)  # type: ignore[attr-defined]


class MemoryListQuery(Paging):
    includeContent: bool | None = None
    statusFilter: Status | None = None
    filter: str | None = Field(None, description="a GoodMem metadata filter expression (docs/filters.md)")
    sortBy: SortBy | None = None
    sortOrder: Literal["ASCENDING", "DESCENDING"] | None = None


class MemoryQuery(_In):
    includeContent: bool | None = None
    includeProcessingHistory: bool | None = None


# --- retrieve --------------------------------------------------------------------------------------------


class EmbedderWeight(_In):
    embedderId: str
    weight: float


class SpaceKey(_In):
    spaceId: str
    embedderWeights: list[EmbedderWeight] | None = None
    filter: str | None = Field(None, description="a GoodMem metadata filter expression (docs/filters.md)")


class Binary(_In):
    contentType: str
    data: str = Field(description="base64")


class ContextItem(_In):
    """Exactly one of ``text`` and ``binary``."""

    text: str | None = None
    binary: Binary | None = None


class Hnsw(_In):
    efSearch: int | None = Field(None, ge=1, le=1000)
    iterativeScan: str | None = None
    maxScanTuples: int | None = Field(None, ge=1, le=2_147_483_647)
    scanMemMultiplier: float | None = Field(None, ge=1.0, le=1000.0)


class ChatConfig(_In):
    reranker_id: UUID | None = None
    llm_id: UUID | None = None
    relevance_threshold: float | None = None
    chronological_resort: bool | None = None
    llm_temp: float | None = Field(None, ge=0.0, le=2.0)
    max_results: int | None = None
    sys_prompt: str | None = None
    prompt: str | None = None
    gen_token_budget: int | None = None


class PostProcessor(_In):
    name: str = _enum([CHAT_POST_PROCESSOR])
    config: ChatConfig | None = None


class OutputBudget(_In):
    tokens: int | None = Field(None, gt=0)


class Retrieve(_In):
    message: str = Field(min_length=1)
    spaceKeys: list[SpaceKey] = Field(min_length=1)
    requestedSize: int | None = None
    fetchMemory: bool | None = None
    fetchMemoryContent: bool | None = Field(None, description="needs fetchMemory")
    context: list[ContextItem] | None = None
    hnsw: Hnsw | None = None
    postProcessor: PostProcessor | None = None
    outputBudget: OutputBudget | None = None


class RetrieveQuery(_In):
    message: str = Field(min_length=1)
    spaceIds: UUID = Field(
        description="a space id (the parameter may be repeated, or hold ids separated by commas)"
    )
    requestedSize: int | None = None
    fetchMemory: bool | None = None
    fetchMemoryContent: bool | None = None
    filter: str | None = None


_STREAM = Raw(
    {"application/x-ndjson": {}, "text/event-stream": {}},
    "The retrieval events, one JSON object a line (NDJSON) or as server-sent events (Accept chooses); a "
    "failure after the first byte is an in-band error event (docs/goodmem-retrieve.md).",
)
_STREAM_HEADERS: dict[str, dict[str, Any]] = {
    TIMEOUT_HEADER: {
        "type": "integer",
        "minimum": 1,
        "maximum": 86_400_000,
        "description": "the caller's deadline in ms: 504 when it passes before the first byte",
    },
    STREAM_TERMINAL_HEADER: {"type": "string", "enum": ["true", "false"]},
    "Accept": {"type": "string", "enum": ["application/x-ndjson", "text/event-stream", "*/*"]},
}


# --- models (embedders, rerankers, LLMs) -----------------------------------------------------------------


class ProviderModel(_Out):
    """EmbedderResponse / RerankerResponse / LLMResponse: never the credentials."""

    displayName: str
    providerType: str
    labels: Labels
    supportedModalities: list[str]


class Embedder(ProviderModel):
    embedderId: str


class Reranker(ProviderModel):
    rerankerId: str


class LLM(ProviderModel):
    llmId: str
    capabilities: dict[str, Any]


class CreatedLLM(_Out):
    llm: LLM
    statuses: list[ItemError]


class EmbedderList(_Out):
    embedders: list[Embedder]


class RerankerList(_Out):
    rerankers: list[Reranker]


class LLMList(_Out):
    llms: list[LLM]


class ApiKeyAuth(_In):
    inlineSecret: str | None = None
    secretRef: dict[str, Any] | None = None
    headerName: str | None = None
    prefix: str | None = None


class Credentials(_In):
    kind: (
        Literal["CREDENTIAL_KIND_API_KEY", "CREDENTIAL_KIND_GCP_ADC", "CREDENTIAL_KIND_UNSPECIFIED"] | None
    ) = None
    apiKey: ApiKeyAuth | None = None
    gcpAdc: dict[str, Any] | None = None


Modality = Literal["TEXT", "IMAGE", "AUDIO", "VIDEO"]


def _provider_types(spec: providers.KindSpec) -> Any:
    return _enum(spec.provider_types)


class NewModelFields(_In):
    displayName: str = Field(min_length=1, max_length=255)
    providerType: str
    endpointUrl: str = Field(min_length=1)
    modelIdentifier: str = Field(min_length=1)
    description: str | None = None
    apiPath: str | None = None
    supportedModalities: list[Modality] | None = None
    credentials: Credentials | None = None
    labels: Labels | None = None
    version: str | None = None
    monitoringEndpoint: str | None = None
    ownerId: UUID | None = None
    dashscopeApiDialect: str | None = None


class NewEmbedder(NewModelFields):
    providerType: str = _provider_types(providers.EMBEDDER)
    dimensionality: int = Field(gt=0)
    embedderId: UUID | None = None
    distributionType: Literal["DENSE", "SPARSE"] | None = None
    maxSequenceLength: int | None = Field(None, gt=0)


class NewReranker(NewModelFields):
    providerType: str = _provider_types(providers.RERANKER)
    rerankerId: UUID | None = None


class NewLLM(NewModelFields):
    providerType: str = _provider_types(providers.LLM)
    llmId: UUID | None = None
    capabilities: dict[str, bool] | None = None
    defaultSamplingParams: dict[str, Any] | None = None
    maxContextLength: int | None = Field(None, gt=0)
    clientConfig: dict[str, Any] | None = None


class ModelUpdate(_In):
    providerType: str | None = None
    displayName: str | None = None
    description: str | None = None
    endpointUrl: str | None = None
    apiPath: str | None = None
    modelIdentifier: str | None = None
    version: str | None = None
    monitoringEndpoint: str | None = None
    supportedModalities: list[Modality] | None = None
    dashscopeApiDialect: str | None = None
    credentials: Credentials | None = None
    replaceLabels: Labels | None = None
    mergeLabels: Labels | None = None


class EmbedderUpdate(ModelUpdate):
    dimensionality: int | None = Field(None, gt=0)
    distributionType: Literal["DENSE", "SPARSE"] | None = None
    maxSequenceLength: int | None = Field(None, gt=0)


class LLMUpdate(ModelUpdate):
    capabilities: dict[str, bool] | None = None
    defaultSamplingParams: dict[str, Any] | None = None
    maxContextLength: int | None = Field(None, gt=0)
    clientConfig: dict[str, Any] | None = None


class ModelListQuery(_In):
    providerType: str | None = None
    ownerId: str | None = None


class CredentialsQuery(_In):
    includeCredentials: bool | None = None


# --- ping ------------------------------------------------------------------------------------------------


class PingOnce(_In):
    targetId: str = Field(
        min_length=1, description="an embedder, reranker or LLM id (a UUID, or a built-in model's name)"
    )
    targetTypeHint: str | None = _enum(ping.TARGET_TYPES, optional=True)
    payloadType: str | None = _enum(ping.PAYLOAD_TYPES, optional=True)
    payload: str | None = Field(None, description="mutually exclusive with payloadSizeBytes")
    payloadSizeBytes: int | None = Field(None, ge=0, le=ping.MAX_PAYLOAD_BYTES)
    timeoutMs: int | None = Field(None, ge=0, le=ping.MAX_TIMEOUT_MS, description="0: 5000")


class PingStreamBody(PingOnce):
    count: int | None = Field(None, ge=0, le=ping.MAX_COUNT, description="0: 4")
    intervalMs: int | None = Field(None, ge=0, le=ping.MAX_INTERVAL_MS, description="0: 1000")
    maxInFlight: int | None = Field(None, ge=0, le=ping.MAX_IN_FLIGHT, description="0: 1")
    jitter: bool | None = None
    labels: Labels | None = None


class PingEndpoint(_Out):
    targetType: str
    targetId: str
    resolvedEndpoint: str
    provider: str
    modelIdentifier: str


class PingTiming(_Out):
    clientSendTimeUnixNanos: int
    serverReceivedTimeUnixNanos: int
    serverSendTimeUnixNanos: int
    clientReceiveTimeUnixNanos: int


class PingResult(_Out):
    endpoint: PingEndpoint
    seq: int
    bytesSent: int
    bytesReceived: int
    ok: bool
    httpStatus: int
    errorMessage: str | None = None
    rttMs: float
    timing: PingTiming
    metadata: dict[str, str] | None = None


_PING_STREAM = Raw(
    {"application/x-ndjson": {}, "text/event-stream": {}},
    "One {result: PingResult} per probe as it finishes, then {summary: PingSummary}; NDJSON or server-sent "
    "events (Accept chooses), as retrieve streams (docs/goodmem-api.md, Ping).",
)
_PING_HEADERS: dict[str, dict[str, Any]] = {
    name: spec for name, spec in _STREAM_HEADERS.items() if name != TIMEOUT_HEADER
}


# --- access policy ---------------------------------------------------------------------------------------


class Audience(_In):
    principalId: UUID | None = None
    allAuthenticated: bool | None = None


class AssignedResource(_In):
    kind: Literal["SPACE"]
    resourceId: UUID


class Rule(_In):
    operation: str = _enum(sorted(GRANTABLE))
    selector: Literal["ANY", "EXACT", "DIRECT_MEMBERS_OF"]
    assignedResource: AssignedResource | None = None


class NewGrant(_In):
    audience: Audience
    rule: Rule
    grantId: UUID | None = None


class Grant(_Out):
    grantId: str
    audience: dict[str, Any]
    rule: dict[str, Any]
    createdAt: int
    createdById: str
    revokedAt: int | None = None
    revokedById: str | None = None


class GrantList(_Out):
    grants: list[Grant]
    nextToken: str | None = None


class GrantQuery(Paging):
    resourceKind: Literal["SPACE", "INSTANCE"] | None = None
    resourceId: UUID | None = Field(None, description="required with resourceKind SPACE")
    includeRevoked: bool | None = None


# --- the table -------------------------------------------------------------------------------------------

_ID = "/{id}"
# Users, keys, memories and grants are named by UUIDs (anything else is a 400); spaces also by the ids of
# containers the ml-commons API created, and models by the names of start-up ones.
_UUID = {"id": {"type": "string", "format": "uuid"}}
_DOWNLOAD_HEADERS = {
    "Range": {"type": "string", "description": "one byte range: bytes=FIRST-LAST, bytes=FIRST- or bytes=-N"},
    "If-Match": {"type": "string", "description": "the saved strong ETag, quotes included"},
}
_MULTIPART_CREATE = {
    "type": "object",
    "properties": {
        "request": {"type": "string", "description": "the JSON of a memory creation request"},
        "file": {"type": "string", "contentMediaType": "application/octet-stream"},
    },
    "required": ["request"],
}
_MULTIPART_BATCH = {
    "type": "object",
    "properties": {
        "requests": {"type": "string", "description": "a JSON array of memory creation requests"},
    },
    "required": ["requests"],
}

_OPERATIONS: dict[tuple[str, str], Operation] = {
    ("GET", "/v1/system/info"): Operation(
        "memproxy's version in GoodMem's shape", {200: SystemInfo}, public=True
    ),
    ("POST", "/v1/system/init"): Operation(
        "Create the root user and key, once", {200: SystemInit}, public=True
    ),
    ("GET", "/v1/instance"): Operation("The instance and its owner", {200: Instance}),
    ("POST", "/v1/access-policy:check"): Operation(
        "Whether the caller may perform each operation now (advisory)", {200: CheckResults}, body=AccessChecks
    ),
    ("POST", "/v1/admin/background-jobs:purge"): Operation(
        "Delete ended background jobs older than a cutoff (administrators)", {200: PurgedJobs}, body=PurgeJobs
    ),
    # users
    ("GET", "/v1/users/me"): Operation("The caller", {200: User}),
    ("POST", "/v1/users/{id}:erase"): Operation(
        "memproxy: erase a user's data (the user or an administrator), with a receipt",
        {200: UserErasureReceipt, 202: UserErasureStarted, 409: UserErasureReceipt},
        body=UserErasure,
        body_required=False,
        query=UserErasureQuery,
        path_params=_UUID,
    ),
    ("GET", "/v1/users/{id}/erasures/{jobId}"): Operation(
        "memproxy: an erasure job of the user (waitForCompletion=false) and its receipt",
        {200: UserErasureJob},
        path_params=_UUID,
    ),
    ("GET", "/v1/users/email/{email}"): Operation("A user by email", {200: User}),
    ("GET", "/v1/users/username/{username}"): Operation("A user by user name", {200: User}),
    ("POST", "/v1/users"): Operation("Create a user (administrators)", {201: User}, body=NewUser),
    ("GET", "/v1/users"): Operation("List users (administrators)", {200: UserList}, query=Paging),
    ("GET", "/v1/users" + _ID): Operation("A user", {200: User}, query=UserQuery, path_params=_UUID),
    ("PUT", "/v1/users" + _ID): Operation("Update a user", {200: User}, body=UserUpdate, path_params=_UUID),
    ("DELETE", "/v1/users" + _ID): Operation("Delete a user", {204: None}, path_params=_UUID),
    # API keys
    ("POST", "/v1/apikeys"): Operation(
        "Create an API key (the raw key is shown once)",
        {201: IssuedApiKey},
        body=NewApiKey,
        body_required=False,
    ),
    ("GET", "/v1/apikeys"): Operation("List API keys", {200: ApiKeyList}, query=ApiKeyQuery),
    ("GET", "/v1/apikeys" + _ID): Operation("An API key's metadata", {200: ApiKey}, path_params=_UUID),
    ("PUT", "/v1/apikeys" + _ID): Operation(
        "Update an API key", {200: ApiKey}, body=ApiKeyUpdate, path_params=_UUID
    ),
    ("DELETE", "/v1/apikeys" + _ID): Operation("Delete an API key", {204: None}, path_params=_UUID),
    # spaces
    ("POST", "/v1/spaces"): Operation("Create a space (a memory container)", {201: Space}, body=NewSpace),
    ("GET", "/v1/spaces"): Operation("List spaces", {200: SpaceList}, query=SpaceQuery),
    ("GET", "/v1/spaces" + _ID): Operation("A space", {200: Space}),
    ("PUT", "/v1/spaces" + _ID): Operation("Update a space", {200: Space}, body=SpaceUpdate),
    ("DELETE", "/v1/spaces" + _ID): Operation("Delete a space and its memories", {204: None}),
    ("POST", "/v1/spaces/{id}:transferOwnership"): Operation(
        "Give a space to another user (its owner or an administrator)",
        {200: TransferredSpace},
        body=TransferOwnership,
    ),
    ("POST", "/v1/spaces/{id}:switchEmbedder"): Operation(
        "memproxy: re-embed the space's memories with another first embedder, without downtime (a job)",
        {200: EmbedderSwitchStarted},
        body=SwitchEmbedder,
    ),
    ("GET", "/v1/spaces" + _ID + "/embedderSwitch"): Operation(
        "memproxy: the progress of the space's latest embedder switch", {200: EmbedderSwitch}
    ),
    ("POST", "/v1/spaces/{id}:cancelEmbedderSwitch"): Operation(
        "memproxy: cancel an embedder switch before it switched", {200: EmbedderSwitchStarted}
    ),
    # memories
    ("POST", "/v1/memories"): Operation(
        "Create a memory (JSON, or multipart with a file)",
        {201: Memory},
        body=NewMemory,
        body_other={"multipart/form-data": _MULTIPART_CREATE},
    ),
    ("GET", "/v1/memories" + _ID): Operation("A memory", {200: Memory}, query=MemoryQuery, path_params=_UUID),
    ("DELETE", "/v1/memories" + _ID): Operation("Delete a memory", {204: None}, path_params=_UUID),
    ("GET", "/v1/memories/{id}/content"): Operation(
        "A memory's original content, as stored (one byte Range: 206; If-Match: 412 on a mismatch)",
        {
            200: Raw({"*/*": {}}, "The bytes, in the memory's type"),
            206: Raw({"*/*": {}}, "The requested byte range"),
            412: GoodMemError,
            416: GoodMemError,
        },
        path_params=_UUID,
        headers=_DOWNLOAD_HEADERS,
    ),
    ("GET", "/v1/memories/{id}/pages"): Operation(
        "A memory's page images", {200: PageImages}, query=PageQuery, path_params=_UUID
    ),
    ("GET", "/v1/memories/{id}/pages/{pageIndex}/image"): Operation(
        "One page image's bytes (the page's only rendition, or the one dpi / contentType select)",
        {
            200: Raw({"image/png": {}}, "The image"),
            206: Raw({"image/png": {}}, "The requested byte range"),
            412: GoodMemError,
            416: GoodMemError,
        },
        query=RenditionQuery,
        path_params={**_UUID, "pageIndex": {"type": "integer", "minimum": 0}},
        headers=_DOWNLOAD_HEADERS,
    ),
    ("POST", "/v1/ocr:document"): Operation(
        "OCR of a PDF or an image, page by page (Tesseract)",
        {200: OcrResponse, 504: GoodMemError},
        body=OcrRequest,
    ),
    ("GET", "/v1/spaces/{spaceId}/memories"): Operation(
        "List a space's memories", {200: MemoryList}, query=MemoryListQuery
    ),
    ("POST", "/v1/memories:batchCreate"): Operation(
        "Create memories (207 when some failed)",
        {200: BatchResults, 207: BatchResults},
        body=BatchCreate,
        body_other={"multipart/form-data": _MULTIPART_BATCH},
    ),
    ("POST", "/v1/memories:batchGet"): Operation(
        "Get memories (207 when some failed)", {200: BatchResults, 207: BatchResults}, body=BatchGet
    ),
    ("POST", "/v1/memories:batchDelete"): Operation(
        "Delete memories by id or selector (207 when some failed)",
        {200: BatchDeleteResults, 207: BatchDeleteResults},
        body=BatchDelete,
    ),
    ("POST", "/v1/memories:retrieve"): Operation(
        "Retrieve: search spaces, stream the results",
        {200: _STREAM, 504: GoodMemError},
        body=Retrieve,
        headers=_STREAM_HEADERS,
    ),
    ("GET", "/v1/memories:retrieve"): Operation(
        "Retrieve (the query-string form)",
        {200: _STREAM, 504: GoodMemError},
        query=RetrieveQuery,
        headers=_STREAM_HEADERS,
    ),
    # models
    ("GET", "/v1/embedders"): Operation("List embedders", {200: EmbedderList}, query=ModelListQuery),
    ("POST", "/v1/embedders"): Operation("Register an embedder", {201: Embedder}, body=NewEmbedder),
    ("GET", "/v1/embedders" + _ID): Operation("An embedder", {200: Embedder}, query=CredentialsQuery),
    ("PUT", "/v1/embedders" + _ID): Operation("Update an embedder", {200: Embedder}, body=EmbedderUpdate),
    ("DELETE", "/v1/embedders" + _ID): Operation("Delete an embedder", {204: None}),
    ("GET", "/v1/rerankers"): Operation("List rerankers", {200: RerankerList}, query=ModelListQuery),
    ("POST", "/v1/rerankers"): Operation("Register a reranker", {201: Reranker}, body=NewReranker),
    ("GET", "/v1/rerankers" + _ID): Operation("A reranker", {200: Reranker}, query=CredentialsQuery),
    ("PUT", "/v1/rerankers" + _ID): Operation("Update a reranker", {200: Reranker}, body=ModelUpdate),
    ("DELETE", "/v1/rerankers" + _ID): Operation("Delete a reranker", {204: None}),
    ("GET", "/v1/llms"): Operation("List LLMs", {200: LLMList}, query=ModelListQuery),
    ("POST", "/v1/llms"): Operation("Register an LLM", {201: CreatedLLM}, body=NewLLM),
    ("GET", "/v1/llms" + _ID): Operation("An LLM", {200: LLM}, query=CredentialsQuery),
    ("PUT", "/v1/llms" + _ID): Operation("Update an LLM", {200: LLM}, body=LLMUpdate),
    ("DELETE", "/v1/llms" + _ID): Operation("Delete an LLM", {204: None}),
    # ping
    ("POST", "/v1/ping:once"): Operation(
        "One timed probe of an embedder, reranker or LLM (a failed probe is ok: false, still 200)",
        {200: PingResult},
        body=PingOnce,
    ),
    ("POST", "/v1/ping:stream"): Operation(
        "Timed probes of a model, streamed as each finishes, then a summary",
        {200: _PING_STREAM},
        body=PingStreamBody,
        headers=_PING_HEADERS,
    ),
    # access policy
    ("POST", "/v1/access-policy/grants"): Operation("Grant a permission", {201: Grant}, body=NewGrant),
    ("GET", "/v1/access-policy/grants"): Operation("List grants", {200: GrantList}, query=GrantQuery),
    ("GET", "/v1/access-policy/grants" + _ID): Operation("A grant", {200: Grant}, path_params=_UUID),
    ("DELETE", "/v1/access-policy/grants" + _ID): Operation(
        "Revoke a grant", {200: Grant}, path_params=_UUID
    ),
}

GOODMEM_API = Api(
    tag="GoodMem",
    error=GoodMemError,
    error_statuses=(400, 401, 403, 404, 409, 413, 429, 503),
    operations=_OPERATIONS,
)
