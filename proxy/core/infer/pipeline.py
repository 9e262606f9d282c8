"""``infer: true``: facts extracted from a conversation by the container's LLM, consolidated with what the
container already knows, written to long-term memory with their history (ml-commons 3.6's flow, §6 of the
agentic-memory spec; docs/infer.md).

Two halves, so that a job can stop anywhere and run again without writing anything twice:

* ``plan_infer`` asks the LLM (extraction per strategy, then the decision step where similar memories
  exist) and returns an ``InferPlan``: plain data, kept with the job, so a retried job does not ask again
  and cannot decide differently the second time;
* ``apply_plan`` writes the plan with ids derived from the job and the position in the plan (a memory
  added twice is the same document; an update or delete is a no-op the second time).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from proxy.core.clock import now_ms
from proxy.core.container_record import Container
from proxy.core.infer.parse import InferError, json_object, read_path
from proxy.core.infer.prompts import DECISION_SYSTEM, EXTRACTION_SYSTEM, decision_prompt, extraction_prompt
from proxy.core.longterm import LongTermMemory, embed_texts, long_term_index, write_long_term
from proxy.core.longterm_mirror import sync_mirror
from proxy.core.models import ChatModel
from proxy.core.models.registry import ConnectorModel
from proxy.core.query import DEFAULT_VECTOR_FIELD, VectorSearch
from proxy.core.search import semantic_search
from proxy.core.services import Services
from proxy.errors import BadRequest
from proxy.models import ProviderRejected
from proxy.store import memories as docs
from proxy.store.client import NodeNotFound
from proxy.store.query import Term, all_of

__all__ = [
    "Decision",
    "InferPlan",
    "InferRequest",
    "StrategyPlan",
    "apply_plan",
    "ask_llm",
    "plan_infer",
    "result_path_of",
    "strategies_for",
]

log = logging.getLogger(__name__)

# ml-commons' default is Bedrock Converse's answer; OpenAI-shaped connectors need
# $.choices[0].message.content.
DEFAULT_RESULT_PATH = "$.output.message.content[0].text"
CUSTOM_PROMPT_RULE = "Custom prompt must specify JSON response format with 'facts' array"
_ID_SPACE = uuid.UUID("6f1c7d52-5b1e-4c7e-9a43-3d1f0d7e2a10")


@dataclass(frozen=True)
class InferRequest:
    """One ``infer: true`` add: what the job carries (``key`` makes its writes idempotent)."""

    key: str
    container_id: str
    messages: list[dict[str, Any]]
    namespace: dict[str, str]
    tags: dict[str, str] = field(default_factory=dict)
    owner_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> InferRequest:
        return cls(**{k: value[k] for k in cls.__dataclass_fields__ if k in value})


@dataclass
class Decision:
    event: str  # ADD / UPDATE / DELETE
    text: str
    memory_id: str  # the new document's id (ADD) or the one changed
    old_text: str | None = None


@dataclass
class StrategyPlan:
    strategy_id: str
    strategy_type: str
    namespace: dict[str, str]
    decisions: list[Decision] = field(default_factory=list)
    error: str | None = None


@dataclass
class InferPlan:
    strategies: list[StrategyPlan] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> InferPlan:
        out = cls()
        for s in value.get("strategies") or []:
            decisions = [Decision(**d) for d in s.get("decisions") or []]
            out.strategies.append(
                StrategyPlan(
                    s["strategy_id"], s["strategy_type"], dict(s["namespace"]), decisions, s.get("error")
                )
            )
        return out


def _derived_id(*parts: str) -> str:
    return str(uuid.uuid5(_ID_SPACE, "/".join(parts)))


def strategies_for(
    container: Container, namespace: Mapping[str, str]
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Enabled strategies whose namespace keys the request has, with their own namespace; others are
    skipped silently, as ml-commons does."""
    out = []
    for strategy in container.configuration.get("strategies") or []:
        keys = strategy.get("namespace") or []
        if strategy.get("enabled", True) and all(k in namespace for k in keys):
            out.append((strategy, {k: namespace[k] for k in keys}))
    return out


def result_path_of(container: Container, strategy: Mapping[str, Any]) -> str:
    own = (strategy.get("configuration") or {}).get("llm_result_path")
    shared = (container.configuration.get("parameters") or {}).get("llm_result_path")
    return str(own or shared or DEFAULT_RESULT_PATH)


async def ask_llm(
    model: ChatModel, system: str, user: str, result_path: str, *, json_output: bool = True
) -> str:
    """The text an LLM answered: an ml-commons connector's answer read at ``llm_result_path`` (as ml-commons
    reads it), a provider model's message content otherwise (asked for JSON output where supported)."""
    if isinstance(model, ConnectorModel):
        answer = (await model.predict({"system_prompt": system, "user_prompt": user})).answer
        text = read_path(answer, result_path)
        if not isinstance(text, str):
            raise InferError(f"the LLM answer at {result_path} is not text")
        return text
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return (await model.complete(messages, temperature=0.0, json_output=json_output)).text


async def _extract(
    svc: Services, container: Container, strategy: Mapping[str, Any], messages: Sequence[Mapping[str, Any]]
) -> list[str]:
    llm_id = (strategy.get("configuration") or {}).get("llm_id") or container.configuration.get("llm_id")
    model = await svc.models.chat_model(str(llm_id))
    custom = (strategy.get("configuration") or {}).get("system_prompt")
    if custom is not None and ('"facts"' not in str(custom) or "JSON" not in str(custom)):
        raise InferError(CUSTOM_PROMPT_RULE)
    system = (
        str(custom)
        if custom
        else EXTRACTION_SYSTEM.get(str(strategy.get("type")), EXTRACTION_SYSTEM["SEMANTIC"])
    )
    text = await ask_llm(model, system, extraction_prompt(messages), result_path_of(container, strategy))
    facts = json_object(text, "facts").get("facts")
    if not isinstance(facts, list):
        raise InferError("the LLM answer's facts is not a list")
    return [f.strip() for f in facts if isinstance(f, str) and f.strip()]


async def _similar(
    svc: Services,
    container: Container,
    strategy_id: str,
    namespace: Mapping[str, str],
    owner_id: str | None,
    facts: Sequence[str],
) -> list[dict[str, Any]]:
    """The long-term memories like the first ``max_infer_size`` facts, in the strategy's namespace (the filter
    inside the knn clause, so each fact finds up to ``max_infer_size`` of its own namespace's memories)."""
    size = int(container.configuration.get("max_infer_size") or 5)
    scope = all_of(
        [
            *(Term(f"namespace.{k}", v) for k, v in namespace.items()),
            Term("namespace_size", len(namespace)),
            Term("strategy_id", strategy_id),
            Term("owner_id", owner_id) if owner_id is not None else None,
        ]
    )
    # One embedding batch for every fact searched, then the searches side by side.
    vectors = (await embed_texts(svc, container, list(facts[:size])))[DEFAULT_VECTOR_FIELD]
    searches = [
        semantic_search(
            svc, VectorSearch(container, k=size, vector=vector, filter=scope, source_includes=("memory",))
        )
        for vector in vectors
    ]
    found: dict[str, dict[str, Any]] = {}
    for hits in await asyncio.gather(*searches):
        for hit in hits:
            score = float(hit.score or 0.0)
            if hit.id not in found or found[hit.id]["score"] < score:
                found[hit.id] = {"id": hit.id, "text": hit.source.get("memory"), "score": round(score, 6)}
    return list(found.values())


def _decisions(answer: Mapping[str, Any], old: Sequence[Mapping[str, Any]], key: str) -> list[Decision]:
    """The decision step's answer, kept to what can be applied: UPDATE/DELETE only on ids the search
    returned (an id the LLM made up is ignored and logged), ADD only with text."""
    known = {str(m["id"]): m for m in old}
    items = answer.get("memory_decision")
    if not isinstance(items, list):
        raise InferError("the LLM answer's memory_decision is not a list")
    out: list[Decision] = []
    for n, item in enumerate(items):
        if not isinstance(item, Mapping):
            continue
        event = str(item.get("event", "")).upper()
        text = item.get("text")
        target = str(item.get("id", ""))
        if event == "ADD" and isinstance(text, str) and text.strip():
            out.append(Decision("ADD", text.strip(), _derived_id(key, "add", str(n))))
        elif event in ("UPDATE", "DELETE") and target in known:
            old_text = known[target].get("text")
            new_text = text.strip() if isinstance(text, str) and text.strip() else old_text
            if event == "UPDATE" and (not new_text or new_text == old_text):
                continue
            out.append(Decision(event, str(new_text or ""), target, old_text))
        elif event in ("UPDATE", "DELETE"):
            log.warning(
                "infer: the LLM decided %s on an id the search did not return (%r); ignored", event, target
            )
    return out


async def plan_infer(svc: Services, container: Container, req: InferRequest) -> InferPlan:
    """Ask the LLM, strategy by strategy; a strategy that fails is planned as an error record."""
    plan = InferPlan()
    for strategy, namespace in strategies_for(container, req.namespace):
        sid, stype = str(strategy.get("id")), str(strategy.get("type"))
        entry = StrategyPlan(sid, stype, namespace)
        plan.strategies.append(entry)
        key = f"{req.key}/{sid}"
        try:
            facts = await _extract(svc, container, strategy, req.messages)
            if not facts:
                continue
            old = await _similar(svc, container, sid, namespace, req.owner_id, facts)
            if not old:
                entry.decisions = [
                    Decision("ADD", f, _derived_id(key, "fact", str(i))) for i, f in enumerate(facts)
                ]
                continue
            model = await svc.models.chat_model(
                str(
                    (strategy.get("configuration") or {}).get("llm_id")
                    or container.configuration.get("llm_id")
                )
            )
            text = await ask_llm(
                model, DECISION_SYSTEM, decision_prompt(old, facts), result_path_of(container, strategy)
            )
            entry.decisions = _decisions(json_object(text, "memory_decision"), old, key)
        except (InferError, BadRequest, ProviderRejected) as exc:
            # What no retry mends (an unusable answer, a refused prompt) is recorded in history, as
            # ml-commons does, and the other strategies still run. A model or node that is down or slow
            # raises on, and so does a model this process does not know (a start-up --llm another process
            # has): the job is retried, by whichever process claims it next.
            entry.error = exc.message
            log.warning("infer: strategy %s of container %s failed: %s", sid, container.id, exc.message)
    return plan


def _history(
    container: Container, req: InferRequest, s: StrategyPlan, d: Decision | None, now: int
) -> dict[str, Any]:
    doc: dict[str, Any] = {"owner_id": req.owner_id} if req.owner_id is not None else {}
    doc["memory_container_id"] = container.id
    if d is not None:
        doc["memory_id"] = d.memory_id
        doc["action"] = d.event
        if d.event in ("UPDATE", "DELETE"):
            doc["before"] = {"memory": d.old_text}
        if d.event in ("ADD", "UPDATE"):
            doc["after"] = {"memory": d.text}
    doc.update(namespace=dict(s.namespace), namespace_size=len(s.namespace))
    if req.tags:  # ml-commons leaves an empty map out
        doc["tags"] = dict(req.tags)
    doc["created_time"] = now
    if d is None:
        doc["error"] = s.error
    return doc


async def apply_plan(svc: Services, container: Container, req: InferRequest, plan: InferPlan) -> None:
    """Write the plan; running it twice leaves the same documents (ids derive from the job and the plan)."""
    index = long_term_index(container)
    history = container.index_name("history")
    now = now_ms()
    ops: list[docs.BulkOp] = []
    for s in plan.strategies:
        adds = [d for d in s.decisions if d.event == "ADD"]
        await write_long_term(
            svc,
            container,
            [
                LongTermMemory(
                    memory=d.text,
                    namespace=s.namespace,
                    tags=dict(req.tags),
                    strategy_type=s.strategy_type,
                    strategy_id=s.strategy_id,
                    id=d.memory_id,
                    owner_id=req.owner_id,
                )
                for d in adds
            ],
            overwrite=True,
        )
        updates = [d for d in s.decisions if d.event == "UPDATE"]
        if updates:
            # Unlike 3.6, an updated memory is re-embedded: its vector must match its new text.
            vectors = await embed_texts(svc, container, [d.text for d in updates])
            for i, d in enumerate(updates):
                fields = {"memory": d.text, "last_updated_time": now, **{n: v[i] for n, v in vectors.items()}}
                try:
                    await docs.update_doc(
                        svc.store, index, d.memory_id, fields, refresh=True, routing=container.id
                    )
                except NodeNotFound:
                    log.info("infer: memory %s was deleted before its update was applied", d.memory_id)
        for d in s.decisions:
            if d.event == "DELETE":
                await docs.delete_doc(svc.store, index, d.memory_id, refresh=True, routing=container.id)
        # An embedding switch under way: the other model's index follows (adds were mirrored by the write).
        await sync_mirror(
            svc, container, [d.memory_id for d in s.decisions if d.event in ("UPDATE", "DELETE")]
        )
        if history is None:
            continue
        records: list[tuple[Decision | None, dict[str, Any]]] = [
            (d, _history(container, req, s, d, now)) for d in s.decisions
        ]
        if s.error is not None:
            records.append((None, _history(container, req, s, None, now)))
        for n, (_, doc) in enumerate(records):
            ops.append(("index", history, _derived_id(req.key, s.strategy_id, "history", str(n)), doc))
    if ops:
        result = await docs.bulk(svc.store, ops, refresh=True)
        if result.get("errors"):
            raise InferError("some history records of an inference could not be written")
