"""GoodMem ping (``POST /v1/ping:once``, ``/v1/ping:stream``): timed probes of an embedder, reranker or LLM.

A probe is one real call to the model through the registry, as a space or a retrieval would make it: an
embedder embeds the payload, a reranker scores the payload against itself, an LLM answers a one-message chat
whose content is the payload. It is timed from the call to its answer; a call that fails or runs past the
probe's timeout is a failed probe (``ok`` false, the error's message and status), never an error of the
request. Whoever may read a model (``GET /v1/{embedders,rerankers,llms}/{id}``) may ping it.

What the SDK leaves open and memproxy chose is written down in docs/goodmem-api.md ("Ping").
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.core.goodmem import embedders
from proxy.core.goodmem import models as provider_models
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.providers import LLM, RERANKER, ProviderModel
from proxy.core.identity import Principal
from proxy.errors import BadRequest, DeadlineExceeded, MemproxyError, NotFound
from proxy.models import ProviderError

__all__ = [
    "DEFAULT_COUNT",
    "DEFAULT_INTERVAL_MS",
    "DEFAULT_PAYLOAD",
    "DEFAULT_TIMEOUT_MS",
    "MAX_COUNT",
    "MAX_INTERVAL_MS",
    "MAX_IN_FLIGHT",
    "MAX_PAYLOAD_BYTES",
    "MAX_TIMEOUT_MS",
    "PAYLOAD_TYPES",
    "TARGET_TYPES",
    "PingRequest",
    "PingSummary",
    "PingTarget",
    "ProbeResult",
    "build_payload",
    "check_target_type",
    "ping_once",
    "probe",
    "probes",
    "resolve_target",
    "summarize",
]

TargetType = Literal["EMBEDDER", "RERANKER", "LLM", "DECISION_MODEL"]
TARGET_TYPES: tuple[str, ...] = ("TARGET_TYPE_UNSPECIFIED", "EMBEDDER", "RERANKER", "LLM", "DECISION_MODEL")
PAYLOAD_TYPES: tuple[str, ...] = ("PAYLOAD_TYPE_UNSPECIFIED", "TEXT", "JSON", "BINARY")

# The SDK's documented server defaults (0 or absent means these).
DEFAULT_COUNT = 4
DEFAULT_INTERVAL_MS = 1000
DEFAULT_TIMEOUT_MS = 5000
# Bounds: a ping is a health check, not a load generator; every probe is a real (maybe billed) call.
MAX_COUNT = 100
MAX_INTERVAL_MS = 60_000
MAX_TIMEOUT_MS = 60_000
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_IN_FLIGHT = 8
DEFAULT_PAYLOAD = "memproxy ping"
# An LLM probe asks for a few tokens only: the round trip is what is measured, not a long generation.
_LLM_MAX_TOKENS = 8
# Jitter moves each gap between probe starts by up to this share of the interval, either way.
_JITTER = 0.2
_FILLER = "memproxy ping "


# --- requests ----------------------------------------------------------------------------------------------


def build_payload(payload: str | None, size_bytes: int | None, payload_type: str | None) -> str:
    """The text every probe sends: ``payload`` as given, or ``size_bytes`` of filler, or the default.

    Models take text only, so BINARY is refused; JSON asks for a JSON text (a given payload must parse,
    the synthetic one is a JSON string of the size)."""
    kind = payload_type or "PAYLOAD_TYPE_UNSPECIFIED"
    if kind == "BINARY":
        raise BadRequest("payloadType BINARY is not supported: memproxy's models take text (TEXT or JSON)")
    if payload is not None and size_bytes is not None:
        raise BadRequest("payload and payloadSizeBytes are mutually exclusive; send at most one")
    if payload:
        if len(payload.encode("utf-8")) > MAX_PAYLOAD_BYTES:
            raise BadRequest(f"payload must be at most {MAX_PAYLOAD_BYTES} bytes (UTF-8)")
        if kind == "JSON":
            try:
                json.loads(payload)
            except ValueError:
                raise BadRequest("payload must be a JSON text when payloadType is JSON") from None
        return payload
    if not size_bytes:
        return json.dumps(DEFAULT_PAYLOAD) if kind == "JSON" else DEFAULT_PAYLOAD
    filler = (_FILLER * (size_bytes // len(_FILLER) + 1))[:size_bytes]
    if kind == "JSON":
        return "0" * size_bytes if size_bytes < 2 else f'"{filler[: size_bytes - 2]}"'
    return filler


@dataclass(frozen=True)
class PingRequest:
    """One ping: the target, the payload text, and (a stream) how many probes how often."""

    target_id: str
    target_type: TargetType | None = None
    payload: str = DEFAULT_PAYLOAD
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    count: int = 1
    interval_ms: int = 0
    max_in_flight: int = 1
    jitter: bool = False


# --- targets -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PingTarget:
    """The model a ping resolved to, and how it is reached (``PingEndpointInfo``)."""

    target_type: TargetType
    model: ProviderModel

    @property
    def target_id(self) -> str:
        return self.model.model_id

    @property
    def provider(self) -> str:
        return str(self.model.view.get("providerType") or "")

    @property
    def model_identifier(self) -> str:
        return str(self.model.view.get("modelIdentifier") or self.model.model_id)

    @property
    def resolved_endpoint(self) -> str:
        base = str(self.model.view.get("endpointUrl") or "").rstrip("/")
        path = str(self.model.view.get("apiPath") or "")
        return f"{base}/{path.lstrip('/')}" if path else base


async def _lookup(gm: GoodMem, principal: Principal, target_id: str, kind: TargetType) -> ProviderModel:
    if kind == "EMBEDDER":
        return await embedders.get_embedder(gm, principal, target_id)
    if kind == "RERANKER":
        return await provider_models.get_model(gm, principal, RERANKER, target_id)
    if kind == "LLM":
        return await provider_models.get_model(gm, principal, LLM, target_id)
    raise NotFound("Decision model not found: memproxy serves no decision models")


async def resolve_target(
    gm: GoodMem, principal: Principal, target_id: str, target_type: TargetType | None
) -> PingTarget:
    """The model ``target_id`` names, read as its own GET would (404 unknown, 403 another's). Without a
    type the embedders are looked in first, then the rerankers, then the LLMs."""
    kinds: Sequence[TargetType] = (target_type,) if target_type else ("EMBEDDER", "RERANKER", "LLM")
    for kind in kinds:
        try:
            return PingTarget(kind, await _lookup(gm, principal, target_id, kind))
        except NotFound:
            if target_type:
                raise
    raise NotFound(f"Ping target not found: no embedder, reranker or LLM has ID {target_id}")


# --- probes ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    """One probe (``PingResult``). Times are Unix nanoseconds of memproxy's clock: ``sent_ns`` when the call
    to the model started, ``received_ns`` when its answer (or failure) came back."""

    seq: int
    ok: bool
    http_status: int
    bytes_sent: int
    bytes_received: int
    rtt_ms: float
    sent_ns: int
    received_ns: int
    error: str | None = None
    timed_out: bool = False
    metadata: dict[str, str] = field(default_factory=dict)


def _answer_bytes(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode("utf-8"))


def _sent_bytes(target: PingTarget, payload: str) -> int:
    """The payload bytes a probe hands the model: a reranker gets it twice (the query and the document)."""
    return len(payload.encode("utf-8")) * (2 if target.target_type == "RERANKER" else 1)


async def _call(gm: GoodMem, target: PingTarget, payload: str) -> tuple[int, dict[str, str]]:
    """One call to the model: (bytes of its answer, metadata)."""
    registry = gm.svc.models
    if target.target_type == "EMBEDDER":
        embedding = await registry.embedding_model(target.target_id)
        vectors = await embedding.embed([payload])
        dims = len(vectors[0]) if vectors else 0
        return _answer_bytes(vectors), {"dimensions": str(dims), "local": str(embedding.local).lower()}
    if target.target_type == "RERANKER":
        reranker = await registry.rerank_model(target.target_id)
        scores = await reranker.rerank(payload, [payload])
        return _answer_bytes(scores), {"score": f"{scores[0]:.6g}" if scores else ""}
    chat = await registry.chat_model(target.target_id)
    reply = await chat.complete([{"role": "user", "content": payload}], max_tokens=_LLM_MAX_TOKENS)
    meta = {"finishReason": reply.finish_reason} if reply.finish_reason else {}
    return len(reply.text.encode("utf-8")), meta


def _failure_status(exc: MemproxyError) -> int:
    if isinstance(exc, ProviderError) and exc.provider_status:
        return exc.provider_status
    return exc.status


async def probe(gm: GoodMem, target: PingTarget, payload: str, timeout_ms: int, seq: int) -> ProbeResult:
    """Call the model once, timed; a failure or a timeout is a failed probe, not an exception."""
    sent_ns = time.time_ns()
    started = time.perf_counter_ns()

    def result(ok: bool, status: int, received: int = 0, **extra: Any) -> ProbeResult:
        elapsed = time.perf_counter_ns() - started
        return ProbeResult(
            seq,
            ok=ok,
            http_status=status,
            bytes_sent=_sent_bytes(target, payload),
            bytes_received=received,
            rtt_ms=elapsed / 1e6,
            sent_ns=sent_ns,
            received_ns=sent_ns + elapsed,
            **extra,
        )

    try:
        async with asyncio.timeout(timeout_ms / 1000):
            received, meta = await _call(gm, target, payload)
    except TimeoutError:
        message = f"no answer within the probe timeout of {timeout_ms} ms"
        return result(False, DeadlineExceeded.status, error=message, timed_out=True)
    except MemproxyError as exc:
        return result(
            False, _failure_status(exc), error=exc.message, timed_out=isinstance(exc, DeadlineExceeded)
        )
    return result(True, 200, received, metadata=meta)


async def ping_once(gm: GoodMem, principal: Principal, req: PingRequest) -> tuple[PingTarget, ProbeResult]:
    target = await resolve_target(gm, principal, req.target_id, req.target_type)
    return target, await probe(gm, target, req.payload, req.timeout_ms, 1)


def _offsets(req: PingRequest) -> list[float]:
    """When each probe starts, in seconds after the first: every ``interval_ms``, moved by jitter."""
    out, at = [], 0.0
    for i in range(req.count):
        if i:
            gap = req.interval_ms / 1000
            at += gap * (1 + random.uniform(-_JITTER, _JITTER)) if req.jitter else gap
        out.append(at)
    return out


async def probes(gm: GoodMem, target: PingTarget, req: PingRequest) -> AsyncGenerator[ProbeResult, None]:
    """``req.count`` probes, started on the interval's cadence with at most ``max_in_flight`` running; each
    result is yielded as its probe finishes (so not always in ``seq`` order). Closing the iterator (or
    cancelling its reader) cancels the probes still running and those not started."""
    finished: asyncio.Queue[asyncio.Task[ProbeResult]] = asyncio.Queue()
    slots = asyncio.Semaphore(req.max_in_flight)
    running: set[asyncio.Task[ProbeResult]] = set()

    async def one(seq: int) -> ProbeResult:
        try:
            return await probe(gm, target, req.payload, req.timeout_ms, seq)
        finally:
            slots.release()

    async def launch() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for seq, offset in enumerate(_offsets(req), start=1):
            await asyncio.sleep(max(0.0, start + offset - loop.time()))
            await slots.acquire()
            task = asyncio.create_task(one(seq))
            running.add(task)
            task.add_done_callback(finished.put_nowait)

    launcher = asyncio.create_task(launch())
    try:
        for _ in range(req.count):
            task = await finished.get()
            running.discard(task)
            yield task.result()  # a probe's unexpected failure (a bug) ends the session with it
    finally:
        launcher.cancel()
        for task in running:
            task.cancel()
        await asyncio.gather(launcher, *running, return_exceptions=True)


# --- the summary -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PingSummary:
    """A session's totals (``PingSummary``); the round-trip figures are over the successful probes (0 when
    none succeeded), percentiles by nearest rank."""

    requests: int
    responses: int
    ok: int
    timeouts: int
    errors: int
    rtt_min_ms: float
    rtt_avg_ms: float
    rtt_p50_ms: float
    rtt_p90_ms: float
    rtt_p99_ms: float
    rtt_max_ms: float
    requests_per_second: float
    bytes_per_second: float
    applied_limits: dict[str, str]


def _rank(ordered: Sequence[float], p: float) -> float:
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else 0.0


def summarize(req: PingRequest, results: Sequence[ProbeResult], elapsed_s: float) -> PingSummary:
    rtts = sorted(r.rtt_ms for r in results if r.ok)
    timeouts = sum(1 for r in results if not r.ok and r.timed_out)
    moved = sum(r.bytes_sent + r.bytes_received for r in results)
    seconds = max(elapsed_s, 1e-9)
    return PingSummary(
        requests=req.count,
        responses=len(results),
        ok=len(rtts),
        timeouts=timeouts,
        errors=len(results) - len(rtts) - timeouts,
        rtt_min_ms=rtts[0] if rtts else 0.0,
        rtt_avg_ms=sum(rtts) / len(rtts) if rtts else 0.0,
        rtt_p50_ms=_rank(rtts, 50),
        rtt_p90_ms=_rank(rtts, 90),
        rtt_p99_ms=_rank(rtts, 99),
        rtt_max_ms=rtts[-1] if rtts else 0.0,
        requests_per_second=len(results) / seconds,
        bytes_per_second=moved / seconds,
        applied_limits={
            "count": str(req.count),
            "intervalMs": str(req.interval_ms),
            "timeoutMs": str(req.timeout_ms),
            "maxInFlight": str(req.max_in_flight),
            "payloadBytes": str(len(req.payload.encode("utf-8"))),
            "jitter": str(req.jitter).lower(),
        },
    )


def check_target_type(value: str | None) -> TargetType | None:
    """``targetTypeHint``: one of the SDK's PingTargetType values (UNSPECIFIED: look in every kind)."""
    if value is None or value == "TARGET_TYPE_UNSPECIFIED":
        return None
    if value not in TARGET_TYPES:
        raise BadRequest(f"targetTypeHint must be one of {', '.join(TARGET_TYPES)}")
    return value  # type: ignore[return-value]
