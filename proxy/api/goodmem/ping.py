"""``POST /v1/ping:once`` and ``POST /v1/ping:stream``: timed probes of an embedder, reranker or LLM.

The bodies (``PingOnceRequest``, ``PingStreamRequest``) are read here into
``proxy.core.goodmem.ping.PingRequest``; the probing is the core's. ``ping:once`` answers one ``PingResult``;
``ping:stream`` answers ``{"result": PingResult}`` per probe as each finishes, then ``{"summary":
PingSummary}``, as NDJSON or server-sent events (``Accept``), framed by :mod:`.streaming` as retrieve is.
Everything that can be an HTTP error (the body, the target, the caller's right to it) is decided before the
first byte; a probe that fails is a result with ``ok: false``, and the answer is 200. The probes stop when
the client disconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace
from typing import Annotated, Any

from aiohttp import web
from pydantic import BeforeValidator

from proxy.api.goodmem.coerce import json_bool, json_int
from proxy.api.goodmem.state import goodmem, principal
from proxy.api.goodmem.streaming import (
    EventStream,
    negotiate_format,
    parse_stream_terminal,
    serve_stream,
)
from proxy.api.goodmem.wire import WireModel, json_body, labels_field, raw_field, reply, wire_field
from proxy.core.goodmem import ping as core
from proxy.core.goodmem.context import GoodMem
from proxy.core.goodmem.ids import check_id
from proxy.errors import BadRequest

__all__ = ["PingOnceBody", "PingStreamBody", "routes"]

log = logging.getLogger(__name__)

routes = web.RouteTableDef()


# --- bodies ----------------------------------------------------------------------------------------------


def _target_id(value: Any) -> str:
    if value is None or value == "":
        raise BadRequest("targetId is required")
    return check_id(value, "targetId")


def _enum(field: str, allowed: tuple[str, ...]) -> BeforeValidator:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        if value not in allowed:
            raise BadRequest(f"{field} must be one of {', '.join(allowed)}")
        return str(value)

    return BeforeValidator(check)


def _bounded(field: str, high: int, meaning: str = "") -> BeforeValidator:
    """An integer 0..``high``; ``meaning`` says what 0 stands for in the message."""

    def check(value: Any) -> int | None:
        message = f"{field} must be an integer between 0 and {high}{meaning}"
        number = json_int(value, field, message=message)
        if number is not None and not 0 <= number <= high:
            raise BadRequest(message)
        return number

    return BeforeValidator(check)


def _payload(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise BadRequest("payload must be a string")
    return value


def _jitter(value: Any) -> bool:
    return json_bool(value, "jitter", False)


_DEFAULT = " (0 uses the default)"


class PingOnceBody(WireModel):
    """``PingOnceRequest``."""

    target_id: Annotated[str, BeforeValidator(_target_id)] = wire_field("targetId")
    target_type_hint: Annotated[str | None, _enum("targetTypeHint", core.TARGET_TYPES)] = raw_field(
        "targetTypeHint"
    )
    payload_type: Annotated[str | None, _enum("payloadType", core.PAYLOAD_TYPES)] = raw_field("payloadType")
    payload: Annotated[str | None, BeforeValidator(_payload)] = raw_field("payload")
    payload_size_bytes: Annotated[
        int | None, _bounded("payloadSizeBytes", core.MAX_PAYLOAD_BYTES, " (0 sends the default payload)")
    ] = raw_field("payloadSizeBytes")
    timeout_ms: Annotated[int | None, _bounded("timeoutMs", core.MAX_TIMEOUT_MS, _DEFAULT)] = raw_field(
        "timeoutMs"
    )

    def to_core(self) -> core.PingRequest:
        return core.PingRequest(
            target_id=self.target_id,
            target_type=core.check_target_type(self.target_type_hint),
            payload=core.build_payload(self.payload, self.payload_size_bytes, self.payload_type),
            timeout_ms=self.timeout_ms or core.DEFAULT_TIMEOUT_MS,
        )


class PingStreamBody(PingOnceBody):
    """``PingStreamRequest``: a ``PingOnceRequest`` and the session's schedule."""

    count: Annotated[int | None, _bounded("count", core.MAX_COUNT, _DEFAULT)] = raw_field("count")
    interval_ms: Annotated[int | None, _bounded("intervalMs", core.MAX_INTERVAL_MS, _DEFAULT)] = raw_field(
        "intervalMs"
    )
    max_in_flight: Annotated[int | None, _bounded("maxInFlight", core.MAX_IN_FLIGHT, " (0 means 1)")] = (
        raw_field("maxInFlight")
    )
    jitter: Annotated[bool, BeforeValidator(_jitter)] = wire_field("jitter")
    # Checked as GoodMem labels, then unused: memproxy keeps no record of a ping session.
    labels: Annotated[dict[str, str], labels_field()] = wire_field("labels")

    def to_core(self) -> core.PingRequest:
        return replace(
            super().to_core(),
            count=self.count or core.DEFAULT_COUNT,
            interval_ms=self.interval_ms or core.DEFAULT_INTERVAL_MS,
            max_in_flight=self.max_in_flight or 1,
            jitter=self.jitter,
        )


# --- answers ---------------------------------------------------------------------------------------------


def _endpoint_json(target: core.PingTarget) -> dict[str, Any]:
    return {
        "targetType": target.target_type,
        "targetId": target.target_id,
        "resolvedEndpoint": target.resolved_endpoint,
        "provider": target.provider,
        "modelIdentifier": target.model_identifier,
    }


def result_json(target: core.PingTarget, result: core.ProbeResult) -> dict[str, Any]:
    """``PingResult``. memproxy is the client of the model; the model reports no clock, so its receive and
    send times are the bounds memproxy knows (its own send and receive)."""
    body: dict[str, Any] = {
        "endpoint": _endpoint_json(target),
        "seq": result.seq,
        "bytesSent": result.bytes_sent,
        "bytesReceived": result.bytes_received,
        "ok": result.ok,
        "httpStatus": result.http_status,
        "rttMs": result.rtt_ms,
        "timing": {
            "clientSendTimeUnixNanos": result.sent_ns,
            "serverReceivedTimeUnixNanos": result.sent_ns,
            "serverSendTimeUnixNanos": result.received_ns,
            "clientReceiveTimeUnixNanos": result.received_ns,
        },
        "metadata": dict(result.metadata),
    }
    if result.error is not None:
        body["errorMessage"] = result.error
    return body


def summary_json(target: core.PingTarget, summary: core.PingSummary) -> dict[str, Any]:
    return {
        "endpoint": _endpoint_json(target),
        "requests": summary.requests,
        "responses": summary.responses,
        "ok": summary.ok,
        "timeouts": summary.timeouts,
        "errors": summary.errors,
        "rttMinMs": summary.rtt_min_ms,
        "rttAvgMs": summary.rtt_avg_ms,
        "rttP50Ms": summary.rtt_p50_ms,
        "rttP90Ms": summary.rtt_p90_ms,
        "rttP99Ms": summary.rtt_p99_ms,
        "rttMaxMs": summary.rtt_max_ms,
        "requestsPerSecond": summary.requests_per_second,
        "bytesPerSecond": summary.bytes_per_second,
        "appliedLimits": dict(summary.applied_limits),
    }


# --- routes ----------------------------------------------------------------------------------------------


@routes.post("/v1/ping:once")
async def ping_once(request: web.Request) -> web.Response:
    who = await principal(request)
    req = PingOnceBody.parse(await json_body(request)).to_core()
    target, result = await core.ping_once(goodmem(request), who, req)
    return reply(result_json(target, result))


async def _send_session(
    stream: EventStream, gm: GoodMem, target: core.PingTarget, req: core.PingRequest
) -> None:
    """Each result as its probe finishes, then the summary; a failure after the first byte goes in-band
    (a notice, then the stream's error record), never as a clean end."""
    started = time.perf_counter()
    results: list[core.ProbeResult] = []
    try:
        async with contextlib.aclosing(core.probes(gm, target, req)) as each:
            async for result in each:
                results.append(result)
                await stream.send({"result": result_json(target, result)})
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    except Exception:
        log.exception("ping stream failed")
        message = "Ping failed: internal error"
        stream.queue({"notice": {"code": "INTERNAL", "message": message}})
        await stream.fail("INTERNAL", message)
        return
    summary = core.summarize(req, results, time.perf_counter() - started)
    stream.queue({"summary": summary_json(target, summary)})
    await stream.complete()


@routes.post("/v1/ping:stream")
async def ping_stream(request: web.Request) -> web.StreamResponse:
    terminal = parse_stream_terminal(request.headers)
    stream = EventStream(request, negotiate_format(request.headers.get("Accept")), terminal=terminal)
    gm = goodmem(request)

    async def run() -> web.StreamResponse:
        who = await principal(request)
        req = PingStreamBody.parse(await json_body(request)).to_core()
        target = await core.resolve_target(gm, who, req.target_id, req.target_type)
        await stream.open()
        await _send_session(stream, gm, target, req)
        response = stream.response
        assert response is not None
        return response

    return await serve_stream(request, stream, run(), "ping")
