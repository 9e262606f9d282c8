"""Settings: one object, filled from command-line flags and environment variables, validated at start-up."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from proxy.models.addresses import parse_allowed

if TYPE_CHECKING:
    from proxy.embedding.config import EngineOptions

__all__ = [
    "DEFAULT_CACHE_TTL_S",
    "DEFAULT_TRUSTED_MODEL_ENDPOINTS",
    "Settings",
    "parse_settings",
    "split_opensearch_urls",
]

DEFAULT_CACHE_TTL_S = 2.0
DEFAULT_TRUSTED_MODEL_ENDPOINTS = (
    r"^https://.*$",
    r"^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?(/.*)?$",
)


@dataclass(frozen=True)
class Settings:
    opensearch_url: str = "http://127.0.0.1:9250"
    host: str = "127.0.0.1"
    port: int = 9280
    # Credentials memproxy uses for its own calls to a secured cluster. Pass-through requests carry the
    # client's own Authorization header instead, so the proxy never widens anyone's access.
    opensearch_username: str | None = None
    opensearch_password: str | None = None
    opensearch_ca_certs: str | None = None
    opensearch_verify_certs: bool = True
    opensearch_client_cert: str | None = None
    opensearch_client_key: str | None = None
    opensearch_timeout_s: float = 60.0
    # Local embedding models: "ID=PATH" entries added to the built-in default.
    embedders: tuple[str, ...] = ()
    embed_device: str = "auto"
    embed_dtype: str = "auto"
    embed_threads: int | None = None
    embed_max_batch_tokens: int = 16384
    embed_max_batch_size: int | None = None  # None: by device (32 texts on CPU, 256 on GPU)
    embed_max_queue: int = 1024
    # Seconds a search may reuse a container document, API key or grant answer it read (0: never).
    cache_ttl_s: float = DEFAULT_CACHE_TTL_S
    log_level: str = "INFO"
    # "text" (one classic line per record) or "json" (one object per line; docs/observability.md).
    log_format: str = "text"
    # /metrics needs an administrator's credential unless the operator opens it (a scraper without a key).
    metrics_public: bool = False
    # uvloop (libuv, in C) makes each HTTP exchange cheaper than asyncio's pure-Python loop; "asyncio" is
    # there for debugging and for platforms without uvloop.
    event_loop: str = "uvloop"
    # Security (docs/security.md). "apikey": every route but health and GoodMem's system init/info needs a
    # credential; "none": the ml-commons routes and pass-through behave like OpenSearch without the security
    # plugin (anyone may do anything; logged loudly at start-up). GoodMem routes always need their keys.
    auth: str = "apikey"
    # Input bounds: a request body, JSON nesting, the text of one memory, the chunks one memory may make.
    max_body_bytes: int = 32 * 1024 * 1024
    max_json_depth: int = 64
    max_memory_chars: int = 1_000_000
    max_chunks_per_memory: int = 1000
    # One caller may hold at most this share of the embedding queue (the rest stays free for others).
    embed_caller_share: float = 0.5
    # Retrieves one caller may have in flight at once (more wait up to 1 s, then 429).
    retrieve_max_per_caller: int = 8
    # A connection must send its request head within header_timeout_s, and a body may pause at most
    # body_timeout_s between reads; one client address may hold at most max_connections_per_address.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections_per_address: int = 256
    # Jobs of one owner this process runs at once (0: half of jobs_workers, at least 1).
    jobs_max_per_owner: int = 0
    # PDF extraction (docs/security.md): XObject draws per page (counted through nested forms), form
    # nesting depth, text characters per page and per document, seconds per page and per document.
    document_max_draws: int = 2_000
    document_max_form_depth: int = 12
    document_max_page_chars: int = 1_000_000
    document_max_chars: int = 20_000_000
    document_page_timeout_s: float = 10.0
    document_text_timeout_s: float = 120.0
    # User-supplied Query DSL may not carry scripts unless the operator allows them.
    allow_scripts: bool = False
    # ml-commons memory retention (docs/opensearch-api.md "Retention"): on by default with this flag;
    # plugins.ml_commons.memory.retention_enabled set through PUT /_cluster/settings still wins.
    memory_retention: bool = False
    # Every search memproxy sends carries this timeout, and the node cancels it after that long.
    search_timeout_s: float = 30.0
    # A vector search whose filter matches at most this many memories scores them all exactly instead of
    # walking the HNSW graph (recall 1.0; cheaper up to about here on the measured node, docs/benchmarks.md);
    # 0: always the graph.
    exact_search_threshold: int = 1000
    # Share of the graph-walked vector searches rerun exactly in the background to measure recall@k per
    # index (memproxy_recall_canary_* in /metrics); 0: none.
    recall_canary_rate: float = 0.01
    # Models beyond the local embedders (docs/models.md): "ID=PATH" (a local cross-encoder) or
    # "ID=URL#provider=...,model=...,key_env=VAR" (a remote reranker); "ID=URL#..." LLMs.
    rerankers: tuple[str, ...] = ()
    llms: tuple[str, ...] = ()
    # The key that encrypts stored model credentials: from MEMPROXY_SECRET_KEY (environment only: a flag
    # would show in the process list) or a file; neither: generated once and kept in the cluster.
    secret_key: str | None = None
    secret_key_file: str | None = None
    # GoodMem retrieve's vector-stage relevanceScore: "live" = what live GoodMem servers send (pgvector's
    # negative inner product, -cos for normalised embeddings, more negative = better; the published
    # integrations rely on it), "cosine" = cos (higher = better). Order and fusion are the same either way.
    goodmem_vector_score: str = "live"
    # Every call to a remote model: one attempt's timeout, retries on 429/5xx, calls in flight per model.
    model_timeout_s: float = 30.0
    model_max_retries: int = 2
    model_max_concurrency: int = 8
    # Regular expressions a runtime-registered model's URL must match (ml-commons'
    # trusted_connector_endpoints_regex): any HTTPS host, and plain HTTP on loopback only.
    trusted_model_endpoints: tuple[str, ...] = DEFAULT_TRUSTED_MODEL_ENDPOINTS
    # Non-public address ranges a runtime-registered model may still connect to (checked on the resolved
    # address at connect time): "loopback", "private", "link-local" or CIDRs. Empty: public addresses only
    # (docs/security.md, "Models: credentials and endpoints"). Start-up models are the operator's: any.
    allow_private_model_endpoints: tuple[str, ...] = ()
    # Durable jobs (docs/jobs.md): jobs this process runs at once (0: none, it only enqueues), the lease a
    # running job holds (renewed while it runs; another process takes over once it expires), the attempts
    # a job gets, and how often an idle process looks for due jobs.
    jobs_workers: int = 2
    jobs_lease_s: float = 60.0
    jobs_max_attempts: int = 5
    jobs_poll_s: float = 1.0
    # Days a job is kept after it ended (COMPLETED or FAILED); 0 keeps every job.
    jobs_retention_days: float = 30.0
    # GoodMem documents (docs/documents.md): the largest document accepted (413 above it), the most pages
    # one may have, the OCR time one document's job may spend, the DPI of stored page images, and the
    # longest text memory still processed within its create request (longer ones, and every document that
    # needs extraction, are processed by a background job and answered PENDING, as GoodMem does).
    document_max_bytes: int = 24 * 1024 * 1024
    document_max_pages: int = 500
    ocr_timeout_s: float = 300.0
    page_image_dpi: int = 150
    sync_max_chars: int = 100_000
    # The layout of the shared memory indices memproxy creates (long-term, working, sessions, history, and
    # GoodMem's memory records and page images; docs/data-model.md, "Index layout and sizing"): primaries and
    # replicas, unless a container's own ``index_settings`` say otherwise. One primary holds ~10 M memories
    # at 384 dimensions within the 50 GB a shard should not outgrow, and can be split later; one replica
    # survives the loss of a node (a single node then reports yellow, which memproxy treats as healthy).
    memory_shards: int = 1
    memory_replicas: int = 1
    # Processes serving the port (docs/operations.md): 1 is one process, as memproxy always ran; more
    # starts a supervisor that binds the port once and runs that many workers on it. A process asked to
    # stop finishes what it is doing for at most shutdown_timeout_s (in-flight requests and streams).
    workers: int = 1
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        # Credentials written into a URL become memproxy's own credentials and leave the URL: a URL with
        # userinfo would make every pass-through request carry them on an anonymous caller's behalf, and
        # the URL is shown by health.
        hosts, username, password = split_opensearch_urls(self.opensearch_url)
        object.__setattr__(self, "opensearch_url", ",".join(hosts))
        if username is not None and self.opensearch_username is None:
            object.__setattr__(self, "opensearch_username", username)
            object.__setattr__(self, "opensearch_password", password)

    @property
    def opensearch_hosts(self) -> tuple[str, ...]:
        """The nodes memproxy talks to (``--opensearch-url`` may list several, comma-separated): every call
        goes to one of them and moves to another when one is unreachable."""
        return tuple(self.opensearch_url.split(","))

    def engine_options(self) -> EngineOptions:
        """The embedding engine's options (the proxy's, and the benchmarks' in-process baseline's)."""
        from proxy.embedding.config import EngineOptions  # the package imports torch: only when asked

        return EngineOptions(
            device=self.embed_device,
            dtype=self.embed_dtype,
            threads=self.embed_threads,
            max_batch_tokens=self.embed_max_batch_tokens,
            max_batch_size=self.embed_max_batch_size,
            max_queue=self.embed_max_queue,
            caller_share=self.embed_caller_share,
        )

    def masked(self) -> dict[str, Any]:
        """The settings as JSON, secrets masked (shown by ``GET /_memproxy/health``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _SECRETS and value:
                value = "***"
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


def split_opensearch_urls(value: str) -> tuple[tuple[str, ...], str | None, str | None]:
    """The node URLs of ``--opensearch-url`` (comma-separated), each without its userinfo and trailing
    ``/``, and the credentials one of them carried (all that carry some must carry the same). Every URL
    must have the same scheme: one TLS setting (CA, client certificate) serves them all."""
    hosts: list[str] = []
    found: set[tuple[str, str]] = set()
    for raw in value.split(","):
        parts = urlsplit(raw.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an OpenSearch URL must be http(s)://host[:port], got {raw.strip()!r}")
        if parts.username is not None or parts.password is not None:
            found.add((unquote(parts.username or ""), unquote(parts.password or "")))
        host = parts.hostname
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        hosts.append(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)).rstrip("/"))
    if len({h.split(":", 1)[0] for h in hosts}) > 1:
        raise ValueError("every OpenSearch URL must have the same scheme (http or https)")
    if len(found) > 1:
        raise ValueError("the OpenSearch URLs carry different credentials; give one --opensearch-username")
    username, password = next(iter(found)) if found else (None, None)
    return tuple(dict.fromkeys(hosts)), username, password


# Never shown: health prints the settings to anyone who asks.
_SECRETS = frozenset({"opensearch_username", "opensearch_password", "opensearch_client_key", "secret_key"})

# flag, env var, type, help
_OPTIONS: list[tuple[str, str, type, str]] = [
    ("opensearch-url", "OPENSEARCH_URL", str, "OpenSearch node URL, or several comma-separated"),
    ("host", "MEMPROXY_HOST", str, "address to listen on"),
    ("port", "MEMPROXY_PORT", int, "port to listen on"),
    ("opensearch-username", "OPENSEARCH_USERNAME", str, "basic-auth user for memproxy's own calls"),
    ("opensearch-password", "OPENSEARCH_PASSWORD", str, "basic-auth password for memproxy's own calls"),
    ("opensearch-ca-certs", "OPENSEARCH_CA_CERTS", str, "CA bundle for a TLS cluster"),
    ("opensearch-client-cert", "OPENSEARCH_CLIENT_CERT", str, "client certificate (mutual TLS)"),
    ("opensearch-client-key", "OPENSEARCH_CLIENT_KEY", str, "client key (mutual TLS)"),
    ("opensearch-timeout-s", "OPENSEARCH_TIMEOUT_S", float, "timeout of one OpenSearch call"),
    ("embed-device", "MEMPROXY_EMBED_DEVICE", str, "auto | cpu | cuda | cuda:N"),
    ("embed-dtype", "MEMPROXY_EMBED_DTYPE", str, "auto | float32 | bfloat16 | float16"),
    ("embed-threads", "MEMPROXY_EMBED_THREADS", int, "torch intra-op threads (default: auto)"),
    ("embed-max-batch-tokens", "MEMPROXY_EMBED_MAX_BATCH_TOKENS", int, "padded tokens per model batch"),
    (
        "embed-max-batch-size",
        "MEMPROXY_EMBED_MAX_BATCH_SIZE",
        int,
        "texts per model batch (default by device)",
    ),
    ("embed-max-queue", "MEMPROXY_EMBED_MAX_QUEUE", int, "queued texts before refusing with 429"),
    (
        "cache-ttl-s",
        "MEMPROXY_CACHE_TTL_S",
        float,
        "seconds a read container or API key is reused (0: off)",
    ),
    ("log-level", "MEMPROXY_LOG_LEVEL", str, "DEBUG | INFO | WARNING | ERROR"),
    ("log-format", "MEMPROXY_LOG_FORMAT", str, "text | json (one JSON object per line)"),
    ("event-loop", "MEMPROXY_EVENT_LOOP", str, "uvloop | asyncio"),
    ("auth", "MEMPROXY_AUTH", str, "apikey | none (none: no authentication on ml-commons and pass-through)"),
    ("max-body-bytes", "MEMPROXY_MAX_BODY_BYTES", int, "largest request body memproxy reads"),
    ("max-json-depth", "MEMPROXY_MAX_JSON_DEPTH", int, "deepest JSON nesting accepted"),
    ("max-memory-chars", "MEMPROXY_MAX_MEMORY_CHARS", int, "longest text of one memory, in characters"),
    ("max-chunks-per-memory", "MEMPROXY_MAX_CHUNKS_PER_MEMORY", int, "most chunks one memory may make"),
    (
        "embed-caller-share",
        "MEMPROXY_EMBED_CALLER_SHARE",
        float,
        "largest share of the queue one caller holds",
    ),
    ("retrieve-max-per-caller", "MEMPROXY_RETRIEVE_MAX_PER_CALLER", int, "retrieves one caller runs at once"),
    ("header-timeout-s", "MEMPROXY_HEADER_TIMEOUT_S", float, "seconds a client has to send request headers"),
    ("body-timeout-s", "MEMPROXY_BODY_TIMEOUT_S", float, "longest pause in a request body, seconds"),
    (
        "max-connections-per-address",
        "MEMPROXY_MAX_CONNECTIONS_PER_ADDRESS",
        int,
        "connections one client address may hold open",
    ),
    ("jobs-max-per-owner", "MEMPROXY_JOBS_MAX_PER_OWNER", int, "jobs of one owner run at once (0: auto)"),
    ("document-max-draws", "MEMPROXY_DOCUMENT_MAX_DRAWS", int, "XObject draws per PDF page"),
    ("document-max-form-depth", "MEMPROXY_DOCUMENT_MAX_FORM_DEPTH", int, "PDF form XObject nesting"),
    ("document-max-page-chars", "MEMPROXY_DOCUMENT_MAX_PAGE_CHARS", int, "text characters per PDF page"),
    ("document-max-chars", "MEMPROXY_DOCUMENT_MAX_CHARS", int, "text characters per document"),
    ("document-page-timeout-s", "MEMPROXY_DOCUMENT_PAGE_TIMEOUT_S", float, "seconds per PDF page's text"),
    ("document-text-timeout-s", "MEMPROXY_DOCUMENT_TEXT_TIMEOUT_S", float, "seconds per PDF's text layer"),
    (
        "search-timeout-s",
        "MEMPROXY_SEARCH_TIMEOUT_S",
        float,
        "timeout of every search, cancelled on the node",
    ),
    (
        "exact-search-threshold",
        "MEMPROXY_EXACT_SEARCH_THRESHOLD",
        int,
        "largest filtered set a vector search scores exactly (0: always HNSW)",
    ),
    (
        "recall-canary-rate",
        "MEMPROXY_RECALL_CANARY_RATE",
        float,
        "share of HNSW searches rerun exactly in the background to measure recall (0: off)",
    ),
    (
        "secret-key-file",
        "MEMPROXY_SECRET_KEY_FILE",
        str,
        "file holding the model-credential key (or the key itself in env MEMPROXY_SECRET_KEY)",
    ),
    (
        "goodmem-vector-score",
        "MEMPROXY_GOODMEM_VECTOR_SCORE",
        str,
        "live | cosine: GoodMem retrieve's vector-stage relevanceScore (live: -cos, as GoodMem sends it)",
    ),
    ("model-timeout-s", "MEMPROXY_MODEL_TIMEOUT_S", float, "timeout of one remote model call"),
    ("model-max-retries", "MEMPROXY_MODEL_MAX_RETRIES", int, "retries of a remote call on 429/5xx"),
    ("model-max-concurrency", "MEMPROXY_MODEL_MAX_CONCURRENCY", int, "remote calls in flight per model"),
    ("jobs-workers", "MEMPROXY_JOBS_WORKERS", int, "jobs this process runs at once (0: none)"),
    ("jobs-lease-s", "MEMPROXY_JOBS_LEASE_S", float, "lease of a running job, renewed while it runs"),
    ("jobs-max-attempts", "MEMPROXY_JOBS_MAX_ATTEMPTS", int, "attempts a job gets before it fails"),
    ("jobs-poll-s", "MEMPROXY_JOBS_POLL_S", float, "seconds between looks for due jobs"),
    (
        "jobs-retention-days",
        "MEMPROXY_JOBS_RETENTION_DAYS",
        float,
        "days an ended job is kept before it is deleted (0: keep every job)",
    ),
    ("document-max-bytes", "MEMPROXY_DOCUMENT_MAX_BYTES", int, "largest document a memory may hold (413)"),
    ("document-max-pages", "MEMPROXY_DOCUMENT_MAX_PAGES", int, "most pages a document may have"),
    ("ocr-timeout-s", "MEMPROXY_OCR_TIMEOUT_S", float, "OCR time one document's job may spend"),
    ("page-image-dpi", "MEMPROXY_PAGE_IMAGE_DPI", int, "resolution of the page images stored for PDFs"),
    (
        "sync-max-chars",
        "MEMPROXY_SYNC_MAX_CHARS",
        int,
        "longest text memory processed within its create request (longer: a background job)",
    ),
    ("workers", "MEMPROXY_WORKERS", int, "processes serving the port (more than 1: a supervisor runs them)"),
    (
        "shutdown-timeout-s",
        "MEMPROXY_SHUTDOWN_TIMEOUT_S",
        float,
        "seconds a stopping process lets in-flight requests and streams finish",
    ),
    (
        "memory-shards",
        "MEMPROXY_MEMORY_SHARDS",
        int,
        "primary shards of each shared memory index memproxy creates (default 1)",
    ),
    (
        "memory-replicas",
        "MEMPROXY_MEMORY_REPLICAS",
        int,
        "replicas of each shared memory index memproxy creates (default 1; small system indices auto-expand)",
    ),
    (
        "trusted-model-endpoints",
        "MEMPROXY_TRUSTED_MODEL_ENDPOINTS",
        str,
        "regular expressions (comma separated) a registered model's URL must match",
    ),
    (
        "allow-private-model-endpoints",
        "MEMPROXY_ALLOW_PRIVATE_MODEL_ENDPOINTS",
        str,
        "non-public ranges a registered model may connect to: loopback, private, link-local or CIDRs "
        "(comma separated; default none)",
    ),
]


def _bool(text: str) -> bool:
    if text.lower() in {"1", "true", "yes", "on"}:
        return True
    if text.lower() in {"0", "false", "no", "off"}:
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memproxy", description="Agentic memory (ml-commons and GoodMem APIs) on OpenSearch."
    )
    for flag, env, typ, help_text in _OPTIONS:
        parser.add_argument(f"--{flag}", type=typ, default=None, help=f"{help_text} (env {env})")
    parser.add_argument(
        "--opensearch-verify-certs",
        type=_bool,
        default=None,
        help="verify the cluster's TLS certificate (env OPENSEARCH_VERIFY_CERTS, default true)",
    )
    parser.add_argument(
        "--embedder",
        action="append",
        default=None,
        metavar="ID=PATH",
        help="register a local sentence-transformers model directory under ID, or a remote embedder "
        "(ID=URL#provider=openai|tei|cohere,model=M,dimension=N,key_env=VAR); repeatable "
        "(env MEMPROXY_EMBEDDERS, comma separated)",
    )
    parser.add_argument(
        "--reranker",
        action="append",
        default=None,
        metavar="ID=PATH|URL",
        help="a local cross-encoder directory, or a remote reranker "
        "(ID=URL#provider=tei|cohere|jina|voyage|vllm,model=M,key_env=VAR); repeatable "
        "(env MEMPROXY_RERANKERS, separated by ;)",
    )
    parser.add_argument(
        "--llm",
        action="append",
        default=None,
        metavar="ID=URL",
        help="an OpenAI-compatible chat model (ID=URL#provider=openai|vllm|ollama|llamacpp|litellm|"
        "openrouter|generic,model=M,key_env=VAR); repeatable (env MEMPROXY_LLMS, separated by ;)",
    )
    parser.add_argument(
        "--allow-scripts",
        type=_bool,
        default=None,
        help="let user-supplied Query DSL carry scripts (env MEMPROXY_ALLOW_SCRIPTS, default false)",
    )
    parser.add_argument(
        "--memory-retention",
        type=_bool,
        nargs="?",
        const=True,
        default=None,
        help="turn ml-commons memory retention on unless plugins.ml_commons.memory.retention_enabled says "
        "otherwise (env MEMPROXY_MEMORY_RETENTION, default false)",
    )
    parser.add_argument(
        "--metrics-public",
        type=_bool,
        nargs="?",
        const=True,
        default=None,
        help="serve /metrics without a credential (env MEMPROXY_METRICS_PUBLIC, default false: an "
        "administrator's key)",
    )
    return parser


def parse_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Flags win over environment variables, which win over the defaults."""
    env = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    for flag, env_name, typ, _ in _OPTIONS:
        name = flag.replace("-", "_")
        value = getattr(args, name)
        if value is None and env.get(env_name):
            try:
                value = typ(env[env_name])
            except ValueError:
                raise SystemExit(f"memproxy: invalid {env_name}={env[env_name]!r}") from None
        if value is not None:
            values[name] = value
    if args.opensearch_verify_certs is not None:
        values["opensearch_verify_certs"] = args.opensearch_verify_certs
    elif env.get("OPENSEARCH_VERIFY_CERTS"):
        values["opensearch_verify_certs"] = _bool(env["OPENSEARCH_VERIFY_CERTS"])
    if args.allow_scripts is not None:
        values["allow_scripts"] = args.allow_scripts
    elif env.get("MEMPROXY_ALLOW_SCRIPTS"):
        values["allow_scripts"] = _bool(env["MEMPROXY_ALLOW_SCRIPTS"])
    if args.memory_retention is not None:
        values["memory_retention"] = args.memory_retention
    elif env.get("MEMPROXY_MEMORY_RETENTION"):
        values["memory_retention"] = _bool(env["MEMPROXY_MEMORY_RETENTION"])
    if args.metrics_public is not None:
        values["metrics_public"] = args.metrics_public
    elif env.get("MEMPROXY_METRICS_PUBLIC"):
        values["metrics_public"] = _bool(env["MEMPROXY_METRICS_PUBLIC"])
    embedders = args.embedder or [e for e in env.get("MEMPROXY_EMBEDDERS", "").split(",") if e.strip()]
    for entry in embedders:
        if "=" not in entry:
            raise SystemExit(f"memproxy: --embedder expects ID=PATH, got {entry!r}")
    values["embedders"] = tuple(e.strip() for e in embedders)
    for name, entries_flag, env_name in (
        ("rerankers", args.reranker, "MEMPROXY_RERANKERS"),
        ("llms", args.llm, "MEMPROXY_LLMS"),
    ):
        entries = entries_flag or [e for e in env.get(env_name, "").split(";") if e.strip()]
        for entry in entries:
            if "=" not in entry:
                raise SystemExit(f"memproxy: --{name[:-1]} expects ID=..., got {entry!r}")
        values[name] = tuple(e.strip() for e in entries)
    if isinstance(values.get("trusted_model_endpoints"), str):
        patterns = tuple(p.strip() for p in values["trusted_model_endpoints"].split(",") if p.strip())
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise SystemExit(f"memproxy: --trusted-model-endpoints: {pattern!r}: {exc}") from None
        values["trusted_model_endpoints"] = patterns
    if isinstance(values.get("allow_private_model_endpoints"), str):
        entries = tuple(e.strip() for e in values["allow_private_model_endpoints"].split(",") if e.strip())
        try:
            parse_allowed(entries)
        except ValueError as exc:
            raise SystemExit(f"memproxy: --allow-private-model-endpoints: {exc}") from None
        values["allow_private_model_endpoints"] = entries
    if env.get("MEMPROXY_SECRET_KEY"):
        values["secret_key"] = env["MEMPROXY_SECRET_KEY"]
    if values.get("exact_search_threshold", 0) < 0:
        raise SystemExit("memproxy: --exact-search-threshold must be 0 or more")
    if not 0.0 <= values.get("recall_canary_rate", 0.0) <= 1.0:
        raise SystemExit("memproxy: --recall-canary-rate must be between 0 and 1")
    if values.get("cache_ttl_s", 0.0) < 0:
        raise SystemExit("memproxy: --cache-ttl-s must be 0 or more")
    if values.get("event_loop", "uvloop") not in ("uvloop", "asyncio"):
        raise SystemExit("memproxy: --event-loop must be uvloop or asyncio")
    if values.get("log_format", "text") not in ("text", "json"):
        raise SystemExit("memproxy: --log-format must be text or json")
    if values.get("auth", "apikey") not in ("apikey", "none"):
        raise SystemExit("memproxy: --auth must be apikey or none")
    if values.get("goodmem_vector_score", "live") not in ("live", "cosine"):
        raise SystemExit("memproxy: --goodmem-vector-score must be live or cosine")
    if not 0 < values.get("embed_caller_share", 0.5) <= 1:
        raise SystemExit("memproxy: --embed-caller-share must be in (0, 1]")
    for name in (
        "retrieve_max_per_caller",
        "max_connections_per_address",
        "document_max_draws",
        "document_max_form_depth",
        "document_max_page_chars",
        "document_max_chars",
    ):
        if values.get(name, 1) < 1:
            raise SystemExit(f"memproxy: --{name.replace('_', '-')} must be 1 or more")
    for name in ("header_timeout_s", "body_timeout_s", "document_page_timeout_s", "document_text_timeout_s"):
        if values.get(name, 1.0) <= 0:
            raise SystemExit(f"memproxy: --{name.replace('_', '-')} must be positive")
    if values.get("workers", 1) < 1:
        raise SystemExit("memproxy: --workers must be 1 or more")
    if values.get("shutdown_timeout_s", 1.0) <= 0:
        raise SystemExit("memproxy: --shutdown-timeout-s must be positive")
    if values.get("jobs_max_per_owner", 0) < 0:
        raise SystemExit("memproxy: --jobs-max-per-owner must be 0 (auto) or more")
    if values.get("jobs_workers", 0) < 0:
        raise SystemExit("memproxy: --jobs-workers must be 0 or more")
    if values.get("jobs_lease_s", 1.0) <= 0 or values.get("jobs_poll_s", 1.0) <= 0:
        raise SystemExit("memproxy: --jobs-lease-s and --jobs-poll-s must be positive")
    if values.get("jobs_retention_days", 0.0) < 0:
        raise SystemExit("memproxy: --jobs-retention-days must be 0 (keep every job) or positive")
    if values.get("jobs_max_attempts", 1) < 1:
        raise SystemExit("memproxy: --jobs-max-attempts must be 1 or more")
    for name in ("document_max_bytes", "document_max_pages", "page_image_dpi"):
        if values.get(name, 1) < 1:
            raise SystemExit(f"memproxy: --{name.replace('_', '-')} must be 1 or more")
    if values.get("ocr_timeout_s", 1.0) <= 0:
        raise SystemExit("memproxy: --ocr-timeout-s must be positive")
    if not 72 <= values.get("page_image_dpi", 150) <= 600:
        raise SystemExit("memproxy: --page-image-dpi must be between 72 and 600")
    if not 1 <= values.get("memory_shards", 1) <= 1024:
        raise SystemExit("memproxy: --memory-shards must be between 1 and 1024")
    if values.get("memory_replicas", 0) < 0:
        raise SystemExit("memproxy: --memory-replicas must be 0 or more")
    if "opensearch_url" in values:
        try:
            split_opensearch_urls(values["opensearch_url"])
        except ValueError as exc:
            raise SystemExit(f"memproxy: --opensearch-url: {exc}") from None
    return Settings(**values)
