"""A small runner of the OpenSearch API specification's test stories (vendored in tests/api_spec_stories/).

A story is prologues, chapters and epilogues; each step has a method (or several), a path with
``{placeholders}`` filled from ``parameters`` (the rest go to the query string), a request payload (a
list of lines for NDJSON), an expected status and payload (a subset of the answer), and may save parts
of its answer (``output``) for later steps (``${step.name}``). A story passes when every prologue
answers under 400 and every chapter answers its status and payload; epilogues clean up and are not judged.
Stories or chapters for another version or distribution are left out, as the specification's own tester
does.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml

STORIES = Path(__file__).resolve().parent / "api_spec_stories"
VERSION = (3, 6, 0)
DISTRIBUTION = "opensearch.org"
# Steps that act on every client's contexts on the node (other test sessions share it): not run anywhere.
SHARED_NODE_UNSAFE = {
    ("DELETE", "/_search/point_in_time/_all"),
    ("DELETE", "/_search/scroll/_all"),
    ("POST", "/_tasks/_cancel"),
}
_VAR = re.compile(r"\$\{([A-Za-z0-9_]+)\.([A-Za-z0-9_.\[\]]+)\}")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def version_fits(spec: Any) -> bool:
    for op, number in re.findall(r"(>=|<=|>|<|=)?\s*(\d+(?:\.\d+)*)", str(spec or "")):
        want = _version(number)
        have = VERSION[: max(len(want), 2)]
        ok = {">=": have >= want, "<=": have <= want, ">": have > want, "<": have < want}.get(
            op or "=", have == want
        )
        if not ok:
            return False
    return True


def distribution_fits(spec: Any) -> bool:
    if not isinstance(spec, dict):
        return True
    return DISTRIBUTION in spec.get("included", [DISTRIBUTION]) and DISTRIBUTION not in spec.get(
        "excluded", []
    )


def _lookup(value: Any, path: str) -> Any:
    for part in re.split(r"[.\[\]]+", path):
        if part == "":
            continue
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


@dataclass
class Run:
    base: str
    headers: dict[str, str]
    saved: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fill(self, value: Any) -> Any:
        if isinstance(value, str):
            whole = _VAR.fullmatch(value)
            if whole:
                return self.saved[whole[1]][whole[2]]
            return _VAR.sub(lambda m: str(self.saved[m[1]][m[2]]), value)
        if isinstance(value, list):
            return [self.fill(v) for v in value]
        if isinstance(value, dict):
            return {k: self.fill(v) for k, v in value.items()}
        return value

    def send(self, step: dict[str, Any], method: str) -> httpx.Response:
        params = dict(self.fill(step.get("parameters") or {}))
        path = "/" + str(step["path"]).lstrip("/")

        def placeholder(m: re.Match[str]) -> str:
            value = params.pop(m[1])
            return quote(",".join(map(str, value)) if isinstance(value, list) else str(value), safe=",*")

        path = re.sub(r"\{([a-z_]+)\}", placeholder, path)
        query = {
            k: (
                ",".join(map(str, v))
                if isinstance(v, list)
                else str(v).lower()
                if isinstance(v, bool)
                else str(v)
            )
            for k, v in params.items()
        }
        request = step.get("request") or {}
        headers = {**self.headers, **{k: str(v) for k, v in (request.get("headers") or {}).items()}}
        content: bytes | None = None
        if "payload" in request:
            payload = self.fill(request["payload"])
            kind = request.get("content_type", "application/json")
            headers["Content-Type"] = kind
            if kind == "application/x-ndjson":
                content = "".join(json.dumps(line) + "\n" for line in payload).encode()
            else:
                content = json.dumps(payload).encode()
        with httpx.Client(base_url=self.base, timeout=120) as client:
            return client.request(method, path, params=query, content=content, headers=headers)

    def step(self, step: dict[str, Any], judged: bool) -> str | None:
        """None when the step did what it should; else why not."""
        methods = step["method"] if isinstance(step["method"], list) else [step["method"]]
        methods = [m for m in methods if (m, step["path"]) not in SHARED_NODE_UNSAFE]
        problem: str | None = None
        expected = step.get("response") or {}
        statuses = step.get("status") or expected.get("status") or (200 if judged else None)
        statuses = statuses if isinstance(statuses, list) else [statuses]
        retry = step.get("retry") or {}
        for method in methods:
            for attempt in range(int(retry.get("count", 0)) + 1):
                resp = self.send(step, method)
                problem = self._judge(resp, statuses, expected.get("payload"), judged)
                if problem is None:
                    break
                time.sleep(int(retry.get("wait", 1000)) / 1000 if attempt < int(retry.get("count", 0)) else 0)
            if problem is not None:
                return f"{method} {step['path']}: {problem}"
            self._save(step, resp)
        return None

    def _judge(self, resp: httpx.Response, statuses: list[Any], payload: Any, judged: bool) -> str | None:
        if statuses == [None]:
            return None if resp.status_code < 400 else f"{resp.status_code} {resp.text[:300]}"
        if resp.status_code not in statuses:
            return f"{resp.status_code} (expected {statuses}) {resp.text[:300]}"
        if judged and payload is not None:
            try:
                got = resp.json()
            except ValueError:
                got = resp.text
            if not subset(self.fill(payload), got):
                return f"payload differs: {resp.text[:300]}"
        return None

    def _save(self, step: dict[str, Any], resp: httpx.Response) -> None:
        if not step.get("id") or not step.get("output"):
            return
        try:
            answer = {"payload": resp.json(), "headers": dict(resp.headers)}
        except ValueError:
            answer = {"payload": resp.text, "headers": dict(resp.headers)}
        self.saved[str(step["id"])] = {
            name: _lookup(answer, str(where)) for name, where in step["output"].items()
        }


def subset(expected: Any, got: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(got, dict) and all(k in got and subset(v, got[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) >= len(expected) and all(map(subset, expected, got))
    if (
        isinstance(expected, (int, float))
        and isinstance(got, (int, float))
        and not isinstance(expected, bool)
    ):
        return float(expected) == float(got)
    return bool(expected == got)


@dataclass(frozen=True)
class Story:
    name: str  # its path under tests/api_spec_stories/
    body: dict[str, Any]


def stories() -> list[Story]:
    """Every story of this node's version and distribution, but the k-NN ones (this node has no native
    engines, and a k-NN index on faiss or nmslib, which ``mode: on_disk`` and the defaults pick, stops it)
    and those registering ML models (they download them)."""
    out = []
    for path in sorted(STORIES.rglob("*.yaml")):
        text = path.read_text()
        body = yaml.safe_load(text)
        if "knn" in str(path) or any(
            word in text for word in ("knn", "faiss", "nmslib", "_plugins/_ml/models/_register")
        ):
            continue
        if not version_fits(body.get("version")) or not distribution_fits(body.get("distributions")):
            continue
        out.append(Story(str(path.relative_to(STORIES)), body))
    return out


def run_story(story: Story, base: str, headers: dict[str, str]) -> str | None:
    """None when the story passes; else the first failing step and why."""
    run = Run(base, headers)
    try:
        for step in story.body.get("prologues") or []:
            if (problem := run.step(step, judged=False)) is not None:
                return f"prologue {problem}"
        for chapter in story.body.get("chapters") or []:
            if not version_fits(chapter.get("version")) or not distribution_fits(
                chapter.get("distributions")
            ):
                continue
            if (problem := run.step(chapter, judged=True)) is not None:
                return f"chapter {chapter.get('synopsis')!r}: {problem}"
        return None
    except (KeyError, IndexError, TypeError, httpx.HTTPError) as exc:
        return f"runner: {type(exc).__name__} {exc}"
    finally:
        for step in story.body.get("epilogues") or []:
            method = step["method"] if isinstance(step["method"], str) else step["method"][0]
            if (method, step["path"]) in SHARED_NODE_UNSAFE:
                continue
            with contextlib.suppress(httpx.HTTPError):
                run.send(step, method)
