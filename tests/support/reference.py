"""The real ml-commons 3.6 on the reference node: remote models whose connectors point at memproxy's OpenAI
embeddings endpoint and at the tests' deterministic LLM, registered and deployed as the tutorials do.

Shared by the conformance suite (tests/conformance) and the side-by-side benchmark (scripts/bench).
"""

from __future__ import annotations

import time
from typing import Any

from opensearchpy import OpenSearch

from tests.opensearch_memory_helpers import EMBEDDER

__all__ = ["ML", "embedding_connector", "llm_connector", "register_remote_model"]

ML = "/_plugins/_ml"


def _ok(client: OpenSearch, method: str, path: str, body: Any = None) -> Any:
    return client.transport.perform_request(method, path, body=body)


def _wait_task(client: OpenSearch, task_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        task = _ok(client, "GET", f"{ML}/tasks/{task_id}")
        if task.get("state") in {"COMPLETED", "FAILED", "COMPLETED_WITH_ERROR"}:
            assert task["state"] == "COMPLETED", task
            return dict(task)
        time.sleep(0.5)
    raise AssertionError(f"ml-commons task {task_id} did not complete")


def embedding_connector(memproxy_url: str) -> dict[str, Any]:
    """An OpenAI embeddings connector to memproxy, as the ml-commons OpenAI blueprint writes it."""
    return {
        "name": "memproxy all-MiniLM-L6-v2",
        "description": "memproxy's local embedder over the OpenAI embeddings protocol",
        "version": 1,
        "protocol": "http",
        "parameters": {"model": EMBEDDER},
        # ml-commons refuses a connector without a credential; memproxy ignores it.
        "credential": {"openAI_key": "unused"},
        "actions": [
            {
                "action_type": "predict",
                "method": "POST",
                "url": f"{memproxy_url}/openai/v1/embeddings",
                "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                "request_body": '{ "input": ${parameters.input}, "model": "${parameters.model}" }',
                "pre_process_function": "connector.pre_process.openai.embedding",
                "post_process_function": "connector.post_process.openai.embedding",
            }
        ],
    }


def llm_connector(llm_url: str) -> dict[str, Any]:
    """An OpenAI chat-completions connector to the tests' deterministic LLM."""
    messages = (
        '[{"role": "system", "content": "${parameters.system_prompt}"}, '
        '{"role": "user", "content": "${parameters.user_prompt}"}]'
    )
    return {
        "name": "deterministic test LLM",
        "description": "tests/support/fake_llm.py",
        "version": 1,
        "protocol": "http",
        "parameters": {"model": "fake-llm"},
        "credential": {"openAI_key": "unused"},
        "actions": [
            {
                "action_type": "predict",
                "method": "POST",
                "url": f"{llm_url}/v1/chat/completions",
                "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                "request_body": '{ "model": "${parameters.model}", "messages": ' + messages + " }",
            }
        ],
    }


def register_remote_model(client: OpenSearch, name: str, connector: dict[str, Any]) -> tuple[str, dict]:
    """connector → register → deploy, as every agentic-memory tutorial does; returns the model id."""
    calls: dict[str, Any] = {}
    calls["connector"] = _ok(client, "POST", f"{ML}/connectors/_create", connector)
    body = {"name": name, "function_name": "remote", "connector_id": calls["connector"]["connector_id"]}
    calls["register"] = _ok(client, "POST", f"{ML}/models/_register", body)
    model_id = calls["register"]["model_id"]
    if calls["register"].get("task_id"):
        _wait_task(client, calls["register"]["task_id"])
    calls["deploy"] = _ok(client, "POST", f"{ML}/models/{model_id}/_deploy")
    if calls["deploy"].get("status") != "COMPLETED":
        _wait_task(client, calls["deploy"]["task_id"])
    calls["get"] = _ok(client, "GET", f"{ML}/models/{model_id}")
    return model_id, calls
