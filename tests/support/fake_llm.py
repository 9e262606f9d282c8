"""A deterministic OpenAI-compatible chat-completions server for tests.

Why it exists: ``infer: true`` makes agentic memory call an LLM (fact extraction, memory decisions, session
summaries). The real ml-commons 3.6 plugin on the reference node reaches it through an HTTP connector, and
memproxy will too; both must get the same answers to the same prompts, so that their results can be compared
and every prompt they sent can be inspected. ``FakeLLM`` speaks OpenAI's real wire format (``POST
/v1/chat/completions``, also ``/chat/completions``; JSON, or SSE chunks ending in ``data: [DONE]`` with
``"stream": true``; errors as ``{"error": {message, type, param, code}}``) and decides only from the prompt.

Prompt text = the ``content`` of every request message (a string, or the ``text`` of its parts), joined by
newlines. Kind, first match wins:

1. ``decision``: the text contains ``memory_decision``, or both ``old_memory`` and ``retrieved_facts``;
2. ``extraction``: it contains ``"facts"`` with the quotes (every ml-commons extraction prompt, its JSON
   enforcement message and any custom prompt ml-commons accepts do) or "extract ... facts/preferences";
3. ``summary``: it contains summary/summarize/summarise;
4. ``other``: anything else; the answer is ``OK``.

The conversation (extraction, summary) is looked for in the prompt text, first hit wins:
a) a JSON array of objects with ``content`` (ml-commons 3.6 sends ``[{"role":"user","content":[{"type":
   "text","text":"..."}]}, ...]`` in a json code fence); a fenced array beats an unfenced one, a later
   array an earlier one; ``content`` is a string, a list of parts with ``text`` (joined by line breaks) or
   an object;
b) lines ``user: ...`` / ``human: ...``; a following unprefixed line continues the message, a blank line or
   an ``assistant:``/``ai:``/``system:`` line ends it;
c) the request's own messages.
User messages have role ``user``/``human`` or none. One whose text contains ``{"facts"`` is ml-commons'
output-format instruction (its JSON enforcement message), not conversation, and is skipped.

Extraction answers ``{"facts":[...]}`` on one line: each user message, in order, is split at line breaks
and after ``.``, ``!`` or ``?`` followed by whitespace; each piece is whitespace-collapsed; a piece ending in
``?`` is a question and dropped; trailing ``.``/``!`` are removed; every non-empty rest is one fact (no
de-duplication).

Decision answers ``{"memory_decision":[...]}`` on one line, from the last JSON object holding
``retrieved_facts`` (a fenced one beats the example in ml-commons' system prompt). Old memories keep prompt
order, de-duplicated by id (first wins). "Same" = equal after casefolding, collapsing whitespace and dropping
trailing ``.``/``!``; "words" = the ``[\\w']+`` runs of the casefolded text. Each fact, in order:

1. DELETE: it starts with ``forget`` or ``I no longer`` and its subject (the words after that prefix, less
   filler words such as that/about/my/the/is/in) is non-empty and all among a memory's words: every such
   undecided memory is DELETEd (``text`` = the memory's text);
2. NONE: it is the same as a memory: that memory gets NONE (when still undecided), nothing is added;
3. UPDATE: the first undecided memory whose first three words equal the fact's first three (both have at
   least three) gets ``{"id", "text": fact, "event": "UPDATE", "old_memory": old text}``;
4. ADD: otherwise (also a forget/no-longer fact that matched nothing) ``{"id": "new_<n>", "text": fact}`` with
   n = 1, 2, ... within the answer; a fact the same as an earlier ADD of the answer is skipped.

Memories no fact touched get NONE. Order: one decision per old memory in prompt order, then the ADDs.

Summary answers plain text: ``"Summary: "`` + the first 200 characters of the user messages' texts
(whitespace-collapsed) joined by single spaces.

With ``response_format`` ``json_object``/``json_schema`` a JSON answer is kept and plain text is wrapped as
``{"<key>": text}`` (key: the schema's first string property, else ``response``).

Tests override answers with ``script(kind, content)`` (queues the next answer of that kind, FIFO, sent as is;
dicts and lists are JSON-encoded) and ``fail_next(status, body, kind=None)`` (the next call, or next call of
that kind, gets an HTTP error). The ``openai`` client retries 429/5xx unless ``max_retries=0``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from aiohttp import web

KINDS = ("extraction", "decision", "summary", "other")
SUMMARY_CHARS = 200

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[\w-]*[ \t]*\r?\n(.*?)```", re.S)
_OPEN = re.compile(r"[\[{]")
_SPLIT = re.compile(r"(?<=[.!?])\s+|\s*[\r\n]+\s*")
_ROLE_LINE = re.compile(r"^\s*(user|human|assistant|ai|system)\s*:\s?(.*)$", re.I)
_WORD = re.compile(r"[\w']+")
_FORGET = re.compile(r"^(?:forget|i no longer)\b")
_EXTRACT = re.compile(r"\bextract\w*\b[^\n]{0,80}?\b(?:facts?|preferences?)\b", re.I)
_SUMMARY = re.compile(r"\bsummar(?:y|ies|i[sz]e\w*)\b", re.I)
# fmt: off
_FILLER = frozenset({
    "that", "about", "the", "a", "an", "my", "me", "i", "i'm", "is", "am", "are", "was", "were", "be",
    "to", "of", "in", "on", "at", "for", "it", "this", "do", "does", "have", "has", "had", "any", "anymore",
    "more", "user", "user's",
})
# fmt: on


@dataclass(frozen=True)
class RecordedPrompt:
    """One call: the full JSON body, its classified kind, prompt text, and what was answered."""

    kind: str
    body: dict[str, Any]
    text: str
    path: str
    status: int
    answer: str | None  # None when fail_next made the call fail


# --- pure decision logic --------------------------------------------------------------------------------


def content_text(content: Any) -> str:
    """The text of an OpenAI/ml-commons message content: a string, a list of parts or one part."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content_text(content.get("text", ""))
    if isinstance(content, list):
        return "\n".join(t for t in map(content_text, content) if t)
    return ""


def classify(text: str) -> str:
    if "memory_decision" in text or ("old_memory" in text and "retrieved_facts" in text):
        return "decision"
    if '"facts"' in text or _EXTRACT.search(text):
        return "extraction"
    return "summary" if _SUMMARY.search(text) else "other"


def _scan(text: str, accept: Callable[[Any], bool]) -> list[Any]:
    found: list[Any] = []
    end = 0
    for m in _OPEN.finditer(text):
        if m.start() < end:
            continue
        try:
            value, stop = _DECODER.raw_decode(text, m.start())
        except ValueError:
            continue
        if accept(value):
            found.append(value)
            end = stop
    return found


def _find_json(text: str, accept: Callable[[Any], bool]) -> Any:
    for blocks in (_FENCE.findall(text), [text]):
        found = [v for block in blocks for v in _scan(block, accept)]
        if found:
            return found[-1]
    return None


def _is_conversation(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(m, dict) and "content" in m for m in v)


def _role_lines(text: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _ROLE_LINE.match(line)
        if m:
            current = {"role": m[1].lower(), "content": m[2]}
            messages.append(current)
        elif not line.strip():
            current = None
        elif current is not None:
            current["content"] += "\n" + line
    return messages if any(m["role"] in ("user", "human") for m in messages) else []


def user_messages(text: str, request_messages: list[Any] | None = None) -> list[str]:
    """The user messages of the conversation embedded in a prompt (rules a-c of the module docstring)."""
    messages = _find_json(text, _is_conversation) or _role_lines(text) or request_messages or []
    out = []
    for m in messages:
        if not isinstance(m, dict) or str(m.get("role") or "user").lower() not in ("user", "human"):
            continue
        t = content_text(m.get("content"))
        if t.strip() and '{"facts"' not in t:
            out.append(t)
    return out


def extract_facts(text: str, request_messages: list[Any] | None = None) -> list[str]:
    facts = []
    for message in user_messages(text, request_messages):
        for piece in _SPLIT.split(message):
            sentence = " ".join(piece.split())
            if sentence and not sentence.endswith("?"):
                fact = sentence.rstrip(".!").rstrip()
                if fact:
                    facts.append(fact)
    return facts


def _same(s: str) -> str:
    return " ".join(s.casefold().split()).rstrip(".! ")


def _words(s: str) -> list[str]:
    return _WORD.findall(s.casefold())


def decide(text: str) -> list[dict[str, str]]:
    request = _find_json(text, lambda v: isinstance(v, dict) and "retrieved_facts" in v) or {}
    memories: dict[str, str] = {}
    for m in request.get("old_memory") or []:
        if isinstance(m, dict) and m.get("id") is not None:
            memories.setdefault(str(m["id"]), str(m.get("text") or ""))
    decided: dict[str, dict[str, str]] = {}
    adds: list[dict[str, str]] = []
    added: set[str] = set()
    for fact in map(str, request.get("retrieved_facts") or []):
        key, words = _same(fact), _words(fact)
        if _FORGET.match(key):
            subject = set(_words(_FORGET.sub("", key))) - _FILLER
            hits = [i for i, t in memories.items() if subject and subject <= set(_words(t))]
            for i in hits:
                decided.setdefault(i, {"id": i, "text": memories[i], "event": "DELETE"})
            if hits:
                continue
        same = [i for i, t in memories.items() if _same(t) == key]
        for i in same:
            decided.setdefault(i, {"id": i, "text": memories[i], "event": "NONE"})
        if same:
            continue
        target = next(
            (
                i
                for i, t in memories.items()
                if i not in decided and len(words) >= 3 and _words(t)[:3] == words[:3]
            ),
            None,
        )
        if target is not None:
            decided[target] = {"id": target, "text": fact, "event": "UPDATE", "old_memory": memories[target]}
        elif key not in added:
            added.add(key)
            adds.append({"id": f"new_{len(adds) + 1}", "text": fact, "event": "ADD"})
    return [decided.get(i) or {"id": i, "text": t, "event": "NONE"} for i, t in memories.items()] + adds


def summarize(text: str, request_messages: list[Any] | None = None) -> str:
    joined = " ".join(" ".join(m.split()) for m in user_messages(text, request_messages))
    return "Summary: " + joined[:SUMMARY_CHARS]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def answer(kind: str, text: str, request_messages: list[Any] | None = None) -> str:
    """The deterministic answer to a prompt of the given kind."""
    if kind == "extraction":
        return _compact({"facts": extract_facts(text, request_messages)})
    if kind == "decision":
        return _compact({"memory_decision": decide(text)})
    if kind == "summary":
        return summarize(text, request_messages)
    return "OK"


def _fit_response_format(content: str, response_format: Any) -> str:
    if not isinstance(response_format, dict) or response_format.get("type") not in (
        "json_object",
        "json_schema",
    ):
        return content
    try:
        json.loads(content)
        return content
    except ValueError:
        pass
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    key = next((k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"), "response")
    return _compact({key: content})


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "requests" if status == 429 else "invalid_request_error"
    code = {429: "rate_limit_exceeded", 401: "invalid_api_key", 404: "not_found"}.get(status)
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --- the server -----------------------------------------------------------------------------------------


class FakeLLM:
    """An OpenAI chat-completions server on 127.0.0.1 in a background thread; usable from sync code.

    ``with FakeLLM() as llm: OpenAI(base_url=llm.base_url, api_key="x")``; a connector posts to
    ``llm.url + "/v1/chat/completions"``.
    """

    def __init__(self, host: str = "127.0.0.1", *, chunk_chars: int = 8) -> None:
        self.host = host
        self.port = 0
        self.chunk_chars = chunk_chars
        self._cond = threading.Condition()
        self._prompts: list[RecordedPrompt] = []
        self._scripts: dict[str, deque[str]] = {k: deque() for k in KINDS}
        self._failures: deque[tuple[int, Any, str | None]] = deque()
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL the ``openai`` client expects (``url`` + ``/v1``)."""
        return self.url + "/v1"

    @property
    def prompts(self) -> list[RecordedPrompt]:
        with self._cond:
            return list(self._prompts)

    def prompts_of(self, kind: str) -> list[RecordedPrompt]:
        return [p for p in self.prompts if p.kind == kind]

    def wait_for(
        self, kind: str | None = None, count: int = 1, timeout: float = 30.0
    ) -> list[RecordedPrompt]:
        """Block until ``count`` calls (of ``kind``) were recorded; ml-commons extracts asynchronously."""

        def matching() -> list[RecordedPrompt]:
            return [p for p in self._prompts if kind is None or p.kind == kind]

        with self._cond:
            if not self._cond.wait_for(lambda: len(matching()) >= count, timeout):
                raise TimeoutError(f"{len(matching())} of {count} {kind or 'any'} prompt(s) after {timeout}s")
            return matching()

    def reset(self) -> None:
        """Forget recorded prompts, scripted answers and pending failures."""
        with self._cond:
            self._prompts.clear()
            self._failures.clear()
            for q in self._scripts.values():
                q.clear()

    def script(self, kind: str, content: str | dict[str, Any] | list[Any]) -> None:
        """Queue ``content`` as the next answer to a prompt of ``kind`` (sent as is, not reformatted)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        with self._cond:
            self._scripts[kind].append(content if isinstance(content, str) else _compact(content))

    def fail_next(
        self, status: int = 500, body: str | dict[str, Any] | None = None, *, kind: str | None = None
    ) -> None:
        """Fail the next call (of ``kind``) with ``status``; ``body``: error message or whole JSON body."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        with self._cond:
            self._failures.append((status, body, kind))

    # lifecycle

    def start(self) -> FakeLLM:
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self.host, 0))
        self.port = sock.getsockname()[1]
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            runner = web.AppRunner(self._app(), access_log=None)
            try:
                loop.run_until_complete(runner.setup())
                loop.run_until_complete(web.SockSite(runner, sock).start())
            except BaseException as e:
                failure.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(runner.cleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"fake-llm-{self.port}", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            self._thread = None
            raise RuntimeError("fake LLM server did not start") from failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None or self._loop is None:
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._thread = self._loop = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # HTTP

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    async def _not_found(self, request: web.Request) -> web.Response:
        return web.json_response(
            _error_body(404, f"Unknown request URL: {request.method} {request.path}"), status=404
        )

    def _record(self, prompt: RecordedPrompt) -> None:
        with self._cond:
            self._prompts.append(prompt)
            self._cond.notify_all()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = json.loads(await request.text())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return web.json_response(
                _error_body(400, "We could not parse the JSON body of your request."), status=400
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            err = _error_body(400, "'messages' is a required property")
            err["error"]["param"] = "messages"
            return web.json_response(err, status=400)
        text = "\n".join(content_text(m.get("content")) for m in messages if isinstance(m, dict))
        kind = classify(text)
        with self._cond:
            failure = next((f for f in self._failures if f[2] in (None, kind)), None)
            if failure is not None:
                self._failures.remove(failure)
            scripted = self._scripts[kind].popleft() if failure is None and self._scripts[kind] else None
            n = next(self._ids)
        if failure is not None:
            status, err_body, _ = failure
            self._record(RecordedPrompt(kind, body, text, request.path, status, None))
            if not isinstance(err_body, dict):
                err_body = _error_body(status, err_body or f"fake LLM: forced failure ({status})")
            return web.json_response(err_body, status=status)
        if scripted is None:
            content = _fit_response_format(answer(kind, text, messages), body.get("response_format"))
        else:
            content = scripted
        self._record(RecordedPrompt(kind, body, text, request.path, 200, content))
        cid, created, model = f"chatcmpl-fake-{n}", int(time.time()), str(body.get("model") or "fake-llm")
        prompt_tokens, completion_tokens = len(text.split()), len(content.split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if body.get("stream"):
            return await self._stream(request, body, cid, created, model, content, usage)
        return web.json_response(
            {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        cid: str,
        created: int,
        model: str,
        content: str,
        usage: dict[str, int],
    ) -> web.StreamResponse:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        base: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        extra: dict[str, Any] = {"usage": None} if include_usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "choices": [choice], **extra}

        step = max(1, self.chunk_chars)
        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": content[i : i + step]}) for i in range(0, len(content), step)]
        events.append(chunk({}, "stop"))
        if include_usage:
            events.append({**base, "choices": [], "usage": usage})
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for event in events:
            await response.write(b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
