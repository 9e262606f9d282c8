"""The fake OpenAI chat-completions server (tests/support/fake_llm.py): wire format and decision rules.

Pure: no OpenSearch. Prompts are built the way ml-commons 3.6 builds them (MemoryProcessingService: a
system_prompt, a user_prompt with the conversation or decision request as compact JSON in a json fence) and
sent through a connector-like body ``{"model", "messages": [system, user]}``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.fake_llm import FakeLLM, classify, extract_facts

ENFORCE = (
    'Respond NOW with ONE LINE of valid JSON ONLY exactly as {"facts":["fact1","fact2",...]}. No extra text, '
    "no code fences, no newlines or tabs, no spaces after commas or colons."
)
ENFORCE_PREF = (
    'Return ONLY ONE LINE of valid JSON exactly as {"facts":["<Preference sentence>. Context: <why/how>. '
    'Categories: <cat1,cat2>"]}. Begin with { and end with }. No extra text.'
)
SEMANTIC_SYSTEM = (
    "<system_prompt>\n<role>Personal Information Organizer</role>\n<objective>Extract and organize personal "
    "information shared within conversations.</objective>\n<response_format>\n<format>You should always "
    'return and only return the extracted facts as a JSON object with a "facts" array.</format>\n'
    '<example>\n{\n  "facts": [\n    "User\'s name is John Smith"\n  ]\n}\n</example>\n'
    "</response_format>\n</system_prompt>"
)
DECISION_SYSTEM = (
    "<system_prompt><role>You are a smart memory manager which controls the memory of a system.</role><task>"
    'You should only respond and always respond with a JSON object containing a "memory_decision" array'
    '</task><example><input>{"old_memory": [{"id": "fact_001", "text": "Enjoys Italian food", '
    '"score": 0.85}],"retrieved_facts": ["Loves pasta and pizza"]}</input><output>{"memory_decision": '
    '[{"id": "fact_001",'
    '"text": "Loves Italian food, especially pasta and pizza","event": "UPDATE","old_memory": '
    '"Enjoys Italian food"}]}</output></example></system_prompt>'
)
SUMMARY_SYSTEM = (
    "You are a helpful assistant. Your task is to summarize the following conversation between a human and "
    "an AI. The summary must be clear, concise, and not exceed 10 words."
)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": [{"type": "text", "text": text}]}


def chat(system: str, user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def extraction_prompt(*conversation: dict[str, Any], enforce: str = ENFORCE) -> list[dict[str, str]]:
    conv = [*conversation, {"role": "user", "content": [{"text": enforce, "type": "text"}]}]
    user = "Analyze the following conversation and extract information:\n```json\n" + _compact(conv) + "\n```"
    return chat(SEMANTIC_SYSTEM, user)


def decision_prompt(old: list[dict[str, Any]], facts: list[str]) -> list[dict[str, str]]:
    request = _compact({"old_memory": old, "retrieved_facts": facts})
    user = (
        "Analyze the following old memories and newly extracted facts, then make memory decisions:\n```json\n"
        + request
        + "\n```"
    )
    return chat(DECISION_SYSTEM, user)


def summary_prompt(*conversation: dict[str, Any]) -> list[dict[str, str]]:
    user = "Summarize the following conversation in no more than 10 words:\n```json\n" + _compact(
        conversation
    )
    return chat(SUMMARY_SYSTEM, user + "\n```")


def post(url: str, body: Any) -> tuple[int, str, str]:
    """(status, content type, body text) of a raw POST, errors included; no proxies."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def llm(fake: FakeLLM) -> FakeLLM:
    fake.reset()
    return fake


@pytest.fixture
def client(llm: FakeLLM) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=llm.base_url, api_key="placeholder", max_retries=0)


def ask(client: Any, messages: list[dict[str, Any]], **kw: Any) -> str:
    completion = client.chat.completions.create(model="fake-model", messages=messages, **kw)
    assert completion.choices[0].finish_reason == "stop"
    return str(completion.choices[0].message.content)


# --- wire format ----------------------------------------------------------------------------------------


def test_wire_shape_both_paths_and_errors(llm: FakeLLM) -> None:
    for path in ("/v1/chat/completions", "/chat/completions"):
        status, ctype, text = post(
            llm.url + path, {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert (status, ctype.split(";")[0]) == (200, "application/json")
        body = json.loads(text)
        assert set(body) == {"id", "object", "created", "model", "choices", "usage"}
        assert (body["object"], body["model"]) == ("chat.completion", "m1")
        assert isinstance(body["created"], int)
        [choice] = body["choices"]
        assert (choice["index"], choice["finish_reason"]) == (0, "stop")
        assert (choice["message"]["role"], choice["message"]["content"]) == ("assistant", "OK")
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] == 2
    assert [(p.kind, p.path, p.answer) for p in llm.prompts] == [
        ("other", "/v1/chat/completions", "OK"),
        ("other", "/chat/completions", "OK"),
    ]
    for url, payload, code in [
        (llm.url + "/v1/embeddings", {"input": "x"}, 404),
        (llm.url + "/v1/chat/completions", b"{not json", 400),
        (llm.url + "/v1/chat/completions", {"model": "m"}, 400),
    ]:
        status, _, text = post(url, payload)
        assert status == code
        assert set(json.loads(text)["error"]) == {"message", "type", "param", "code"}


# --- fact extraction ------------------------------------------------------------------------------------

CONVERSATION = (
    msg(
        "user", "Hi, I'm Alice.  I work at Acme as a data engineer! What's the weather today? I like hiking."
    ),
    msg("assistant", "Nice to meet you, Alice. I cannot check the weather."),
    msg("user", "My dog is named Rex\nDo you like dogs?"),
)
FACTS = ["Hi, I'm Alice", "I work at Acme as a data engineer", "I like hiking", "My dog is named Rex"]


@pytest.mark.parametrize("enforce", [ENFORCE, ENFORCE_PREF], ids=["semantic", "user_preference"])
def test_extraction_of_an_ml_commons_prompt(llm: FakeLLM, client: Any, enforce: str) -> None:
    messages = extraction_prompt(*CONVERSATION, enforce=enforce)
    content = ask(client, messages)
    assert "\n" not in content
    assert json.loads(content) == {"facts": FACTS}
    [recorded] = llm.prompts
    assert recorded.kind == "extraction"
    assert recorded.body["messages"] == messages and recorded.body["model"] == "fake-model"
    assert recorded.answer == content


def test_extraction_finds_role_lines_and_plain_chat_messages() -> None:
    lines = (
        "Extract facts as JSON.\nuser: I live in Paris. Do you?\nassistant: Yes.\nUSER: I like tea\n\nBye."
    )
    assert extract_facts(lines) == ["I live in Paris", "I like tea"]
    plain = [
        {"role": "system", "content": 'Return {"facts": []}'},
        {"role": "user", "content": "I am 30. Ok?"},
    ]
    assert extract_facts('Return {"facts": []}\nI am 30. Ok?', plain) == ["I am 30"]
    assert extract_facts('{"facts": []}') == []


def test_classification_of_ml_commons_prompts() -> None:
    assert classify(SEMANTIC_SYSTEM) == "extraction"
    summary_strategy = 'summarize the given text block ... as a JSON object with a "facts" array'
    assert classify(summary_strategy) == "extraction"
    assert classify("Please extract the user preferences from this chat") == "extraction"
    assert classify(DECISION_SYSTEM) == "decision"
    assert classify(SUMMARY_SYSTEM) == "summary"
    assert classify("What is the capital of France?") == "other"


# --- decisions ------------------------------------------------------------------------------------------


def mem(i: str, text: str, score: float = 0.9) -> dict[str, Any]:
    return {"id": i, "text": text, "score": score}


@pytest.mark.parametrize(
    ("old", "facts", "expected"),
    [
        pytest.param(
            [mem("m1", "I like pizza")],
            ["i like  PIZZA."],
            [{"id": "m1", "text": "I like pizza", "event": "NONE"}],
            id="identical-none",
        ),
        pytest.param(
            [mem("m1", "My name is Alice")],
            ["My name is Alicia"],
            [{"id": "m1", "text": "My name is Alicia", "event": "UPDATE", "old_memory": "My name is Alice"}],
            id="same-three-words-update",
        ),
        pytest.param(
            [mem("m1", "I live in Paris"), mem("m2", "My dog is named Rex")],
            ["I no longer live in Paris", "Forget that my dog is named Rex"],
            [
                {"id": "m1", "text": "I live in Paris", "event": "DELETE"},
                {"id": "m2", "text": "My dog is named Rex", "event": "DELETE"},
            ],
            id="forget-and-no-longer-delete",
        ),
        pytest.param(
            [mem("m1", "I have a cat")],
            ["I work at Acme", "I no longer smoke", "I work at Acme"],
            [
                {"id": "m1", "text": "I have a cat", "event": "NONE"},
                {"id": "new_1", "text": "I work at Acme", "event": "ADD"},
                {"id": "new_2", "text": "I no longer smoke", "event": "ADD"},
            ],
            id="add-and-untouched-none",
        ),
        pytest.param(
            [mem("m1", "I like pizza"), mem("m2", "My name is Bob"), mem("m1", "I like pizza", 0.5)],
            ["My name is Robert", "I like pizza", "Hiking is my hobby"],
            [
                {"id": "m1", "text": "I like pizza", "event": "NONE"},
                {"id": "m2", "text": "My name is Robert", "event": "UPDATE", "old_memory": "My name is Bob"},
                {"id": "new_1", "text": "Hiking is my hobby", "event": "ADD"},
            ],
            id="mixed-with-duplicate-ids",
        ),
    ],
)
def test_decision_rules(
    llm: FakeLLM, client: Any, old: list[dict[str, Any]], facts: list[str], expected: list[dict[str, str]]
) -> None:
    content = ask(client, decision_prompt(old, facts))
    assert json.loads(content) == {"memory_decision": expected}  # the system prompt's example is not used
    assert [p.kind for p in llm.prompts] == ["decision"]


# --- summary, other, response_format --------------------------------------------------------------------


def test_summary_and_other(llm: FakeLLM, client: Any) -> None:
    long = "I am planning a trip to Japan in April. " * 8
    content = ask(
        client, summary_prompt(msg("user", "Hello there."), msg("assistant", "Hi!"), msg("user", long))
    )
    joined = "Hello there. " + " ".join(long.split())
    assert content == "Summary: " + joined[:200]
    assert ask(client, [{"role": "user", "content": "What is the capital of France?"}]) == "OK"
    assert [p.kind for p in llm.prompts] == ["summary", "other"]


def test_response_format_json(client: Any) -> None:
    question = [{"role": "user", "content": "Tell me a joke"}]
    assert json.loads(ask(client, question, response_format={"type": "json_object"})) == {"response": "OK"}
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    content = ask(client, summary_prompt(msg("user", "I like tea.")), response_format=fmt)
    assert json.loads(content) == {"summary": "Summary: I like tea."}
    facts = ask(
        client, extraction_prompt(msg("user", "I like tea.")), response_format={"type": "json_object"}
    )
    assert json.loads(facts) == {"facts": ["I like tea"]}


# --- streaming ------------------------------------------------------------------------------------------


def test_streaming_reassembles_to_the_same_content(llm: FakeLLM, client: Any) -> None:
    messages = extraction_prompt(*CONVERSATION)
    whole = ask(client, messages)
    stream = client.chat.completions.create(
        model="fake-model", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole
    assert len(chunks) > 4
    assert [p.kind for p in llm.prompts] == ["extraction", "extraction"]


def test_streaming_raw_sse(llm: FakeLLM) -> None:
    status, ctype, text = post(
        llm.url + "/v1/chat/completions",
        {"model": "m", "stream": True, "messages": summary_prompt(msg("user", "Hi."))},
    )
    assert (status, ctype.split(";")[0]) == (200, "text/event-stream")
    events = text.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Summary: Hi."


# --- scripted and failing answers -----------------------------------------------------------------------


def test_scripted_answers_override_one_call_of_their_kind(llm: FakeLLM, client: Any) -> None:
    llm.script("extraction", {"facts": ["forced"]})
    llm.script("decision", "not json")
    extraction = extraction_prompt(msg("user", "I like tea."))
    assert json.loads(ask(client, extraction)) == {"facts": ["forced"]}
    assert json.loads(ask(client, extraction)) == {"facts": ["I like tea"]}
    assert ask(client, decision_prompt([], ["x"])) == "not json"
    with pytest.raises(ValueError):
        llm.script("facts", "x")


def test_failures(llm: FakeLLM, client: Any) -> None:
    openai = pytest.importorskip("openai")
    llm.fail_next(429, "slow down")
    with pytest.raises(openai.RateLimitError) as caught:
        ask(client, [{"role": "user", "content": "hi"}])
    assert caught.value.body == {
        "message": "slow down",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert ask(client, [{"role": "user", "content": "hi"}]) == "OK"

    llm.fail_next(500, kind="decision")
    assert json.loads(ask(client, extraction_prompt(msg("user", "I like tea."))))["facts"] == ["I like tea"]
    with pytest.raises(openai.InternalServerError):
        ask(client, decision_prompt([], ["I like tea"]))
    assert [(p.kind, p.status, p.answer is None) for p in llm.prompts] == [
        ("other", 429, True),
        ("other", 200, False),
        ("extraction", 200, False),
        ("decision", 500, True),
    ]


def test_failure_raw_body_and_wait_for(llm: FakeLLM) -> None:
    llm.fail_next(503, {"error": {"message": "down", "type": "server_error", "param": None, "code": None}})
    status, _, text = post(
        llm.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert (status, json.loads(text)["error"]["message"]) == (503, "down")
    assert len(llm.wait_for("other", 1, timeout=1)) == 1
    with pytest.raises(TimeoutError):
        llm.wait_for("decision", 1, timeout=0.2)
    llm.reset()
    assert llm.prompts == []
