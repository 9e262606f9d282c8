"""memproxy's own prompts for ``infer: true``, written for the job; the JSON contracts are ml-commons'.

Extraction answers ``{"facts": ["...", ...]}``; the decision step answers ``{"memory_decision": [{"id",
"text", "event": "ADD|UPDATE|DELETE|NONE", "old_memory"}]}``. The conversation and the decision input are
sent as fenced JSON, so a model (and the tests' deterministic LLM) reads them unambiguously.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DECISION_SYSTEM", "EXTRACTION_SYSTEM", "decision_prompt", "extraction_prompt"]

_JSON_RULE = (
    'Answer with one line of JSON and nothing else: {"facts": ["fact one", "fact two"]}. '
    'Use an empty list, {"facts": []}, when there is nothing worth remembering.'
)

EXTRACTION_SYSTEM: dict[str, str] = {
    "SEMANTIC": (
        "You keep the long-term memory of an assistant. From the conversation, extract the facts worth "
        "remembering about the user and their world: each a short, self-contained sentence that is true "
        "without the conversation around it (who, what, where), taken from what the user said or from "
        "conclusions the assistant stated and the user accepted. Leave out questions, greetings, "
        "small talk and anything only the assistant claimed. " + _JSON_RULE
    ),
    "USER_PREFERENCE": (
        "You keep the long-term memory of an assistant. From the conversation, extract the user's "
        "preferences, explicit or clearly implied: likes, dislikes, habits, choices and how they want "
        "things done, each as one short self-contained sentence about the user. Leave out everything "
        "that is not a preference. " + _JSON_RULE
    ),
    "SUMMARY": (
        "You keep the long-term memory of an assistant. Summarise the conversation so far in a few short, "
        "self-contained sentences that keep its decisions, open questions and facts, and put each "
        "sentence in the list. " + _JSON_RULE
    ),
}

DECISION_SYSTEM = (
    "You maintain a long-term memory store. You get the memories it already holds that are similar to "
    "newly extracted facts (old_memory: id, text, score) and the new facts (retrieved_facts). Decide for "
    "each new fact, and for each old memory it touches, one event:\n"
    "- ADD: the fact is new; give it as text, without an id;\n"
    "- UPDATE: the fact refines or corrects an old memory; give the old memory's id, the merged text, and "
    "the previous text as old_memory;\n"
    "- DELETE: the fact says an old memory is no longer true; give the old memory's id and its text;\n"
    "- NONE: the fact is already known; give the old memory's id and its text.\n"
    "Only use ids from old_memory. Answer with one line of JSON and nothing else: "
    '{"memory_decision": [{"id": "...", "text": "...", "event": "ADD|UPDATE|DELETE|NONE", '
    '"old_memory": "..."}]}'
)


def _fenced(value: Any) -> str:
    return "```json\n" + json.dumps(value, ensure_ascii=False) + "\n```"


def extraction_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The user prompt of the extraction call: the conversation as fenced JSON, then the output rule."""
    conversation = [{"role": m.get("role"), "content": m.get("content")} for m in messages]
    return "Conversation:\n" + _fenced(conversation) + "\n\n" + _JSON_RULE


def decision_prompt(old_memory: Sequence[Mapping[str, Any]], facts: Sequence[str]) -> str:
    payload = {"old_memory": list(old_memory), "retrieved_facts": list(facts)}
    return "Memories and new facts:\n" + _fenced(payload) + "\n\nAnswer with the memory_decision JSON."
