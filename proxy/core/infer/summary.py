"""The summary of a session memproxy creates for a conversational add (as ml-commons asks its LLM for one).

ml-commons asks synchronously, before the add answers, and answers 500 when the LLM fails; memproxy asks the
same way but keeps the add when the LLM fails: the session is created without a summary and the failure is
logged (docs/infer.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core.container_record import Container
from proxy.core.infer.pipeline import ask_llm, result_path_of
from proxy.core.services import Services
from proxy.errors import MemproxyError

__all__ = ["session_summary"]

log = logging.getLogger(__name__)

DEFAULT_MAX_WORDS = "10"


def _system(max_words: str) -> str:
    return (
        f"Write a summary of the conversation below in at most {max_words} words: what the user talked "
        "about, as a short phrase. Answer with the summary alone, no quotes and no JSON."
    )


async def session_summary(
    svc: Services, container: Container, messages: Sequence[Mapping[str, Any]]
) -> str | None:
    """The LLM's summary of ``messages``; "" for no messages (no call, as ml-commons); None if it failed."""
    if not messages:
        return ""
    llm_id = container.configuration.get("llm_id")
    params = (container.configuration.get("parameters") or {}).get("session") or {}
    max_words = str(params.get("max_summary_size") or DEFAULT_MAX_WORDS)
    conversation = [{"role": m.get("role"), "content": m.get("content")} for m in messages]
    user = "Conversation:\n```json\n" + json.dumps(conversation, ensure_ascii=False) + "\n```"
    try:
        model = await svc.models.chat_model(str(llm_id))
        text = await ask_llm(
            model, _system(max_words), user, result_path_of(container, {}), json_output=False
        )
    except MemproxyError as exc:
        log.warning("session summary for container %s failed: %s", container.id, exc.message)
        return None
    return text.strip()
