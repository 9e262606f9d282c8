"""The README's "Five-minute tour", run as written (issue 29, item 2).

The tour's code blocks are the ones the README marks ``<!-- tour: NAME -->`` in that section; every fenced
block of the section must carry the mark, so a block cannot slip out of the test. They run in order in one
``bash`` session under ``set -euo pipefail`` (variables carry between them as a reader's shell carries them),
each Python block as a file run by the tests' interpreter from that shell, so it reads the shell's exported
variables through ``os.environ``. ``curl`` is wrapped with ``--fail-with-body``, so an HTTP error answer
fails the tour as an error does in a reader's eyes.

What the test replaces, and only that: the ``start`` block (``scripts/run-local``) is memproxy started as
run-local starts it (``python -m proxy --opensearch-url <the local node>``) on a free port, which is written
over the tour's ``127.0.0.1:9280``; and the node's GoodMem instance record is forgotten first (as
``test_goodmem_api.py`` does), so that ``/v1/system/init`` answers a fresh root key as on a new cluster.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, ProxyProcess

SECTION = "## Five-minute tour"
TOUR_PORT = "127.0.0.1:9280"
BLOCK = re.compile(r"<!-- tour: ([a-z-]+) -->\n```(bash|python)\n(.*?)^```$", re.S | re.M)
# What the tour consists of, in order: dropping or reordering a step is a change this test must see.
STEPS = [
    "start",
    "key",
    "ml-commons-curl",
    "ml-commons-python",
    "goodmem-python",
    "goodmem-curl",
    "console",
    "cli",
]
BEGIN = "::tour-block::"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Block:
    name: str
    lang: str
    code: str


def tour_blocks(readme: str) -> list[Block]:
    """The marked code blocks of the tour section, in order."""
    assert SECTION in readme, f"README.md has no {SECTION!r} section"
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = [Block(*m.groups()) for m in BLOCK.finditer(section)]
    fences = len(re.findall(r"^```", section, re.M))
    assert fences == 2 * len(blocks), "every code block of the tour is marked <!-- tour: NAME -->"
    return blocks


def tour_script(blocks: list[Block], port: int, workdir: Path) -> str:
    """One bash script running ``blocks`` in order, each announced on stdout by a ``BEGIN`` line."""
    lines = ["set -euo pipefail", 'curl() { command curl --fail-with-body "$@"; }']
    for i, block in enumerate(blocks):
        code = block.code.replace(TOUR_PORT, f"127.0.0.1:{port}")
        lines.append(f"printf '\\n{BEGIN}%s\\n' {block.name}")
        if block.lang == "bash":
            lines.append(code)
        else:
            path = workdir / f"{i:02d}-{block.name}.py"
            path.write_text(code)
            lines.append(f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}")
    # What later checks need of the shell's state, read back as the reader's shell holds it.
    lines.append(f'printf \'\\n{BEGIN}env\\n%s\\n%s\\n\' "$KEY" "$CID"')
    return "\n".join(lines) + "\n"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str

    def outputs(self) -> dict[str, list[str]]:
        """Each block's stdout lines (blank lines dropped), by block name."""
        out: dict[str, list[str]] = {}
        current: list[str] | None = None
        for line in self.stdout.splitlines():
            if line.startswith(BEGIN):
                current = out.setdefault(line[len(BEGIN) :], [])
            elif current is not None and line.strip():
                current.append(line)
        return out


def run_tour(blocks: list[Block], port: int, workdir: Path, timeout: float = 240) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMPROXY_") and k not in ("KEY", "CID")}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", tour_script(blocks, port, workdir)],
        cwd=REPO,
        # mktemp -d (the tour's scratch folder) lands in the test's own folder.
        env={**env, "TMPDIR": str(workdir)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout, done.stderr)


# --- the tour's text and the harness (no node) ----------------------------------------------------------


def readme_blocks() -> list[Block]:
    return tour_blocks((REPO / "README.md").read_text())


def test_the_tour_has_its_steps_in_order_and_the_start_is_run_local() -> None:
    blocks = readme_blocks()
    assert [b.name for b in blocks] == STEPS
    assert blocks[0].code.strip() == "scripts/run-local"
    # The test's own start stands in for run-local: both run the proxy module on the local node's URL.
    assert '-m proxy --opensearch-url "$url"' in (REPO / "scripts" / "run-local").read_text()
    # Every step talks to the port the README names, which the test writes over.
    assert all(TOUR_PORT in b.code for b in blocks[1:])


def test_a_failing_line_stops_the_tour(tmp_path: Path) -> None:
    run = run_tour([Block("a", "bash", "echo one\nfalse\necho two\n")], 1, tmp_path, timeout=30)
    assert run.returncode != 0 and run.outputs()["a"] == ["one"]

    unset = run_tour([Block("a", "bash", 'echo "$NOT_SET_ANYWHERE"\n')], 1, tmp_path, timeout=30)
    assert unset.returncode != 0 and "NOT_SET_ANYWHERE" in unset.stderr

    python = [Block("p", "python", "raise SystemExit('broken')\n"), Block("b", "bash", "echo after\n")]
    run = run_tour(python, 1, tmp_path, timeout=30)
    assert run.returncode != 0 and "b" not in run.outputs() and "broken" in run.stderr


def test_variables_carry_from_bash_to_python_blocks(tmp_path: Path) -> None:
    blocks = [
        Block("a", "bash", "export KEY=k1 CID=c1\nLOCAL=x\n"),
        Block("p", "python", "import os\nprint(os.environ['KEY'], os.environ.get('LOCAL'))\n"),
        Block("b", "bash", 'echo "$LOCAL"\n'),
    ]
    run = run_tour(blocks, 1, tmp_path, timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.outputs() == {"a": [], "p": ["k1 None"], "b": ["x"], "env": ["k1", "c1"]}


# --- the tour itself --------------------------------------------------------------------------------------


@pytest.fixture
def tour_proxy(opensearch_url: str) -> Iterator[ProxyProcess]:
    # A fresh cluster's init: forget the instance record (earlier runs and other tests initialised it).
    httpx.delete(f"{opensearch_url}/memproxy-goodmem-system/_doc/instance", params={"refresh": "true"})
    proxy = ProxyProcess(opensearch_url)
    yield proxy
    proxy.stop()


def _json_lines(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


@pytest.mark.timeout(420)
def test_the_five_minute_tour_runs_as_written(tour_proxy: ProxyProcess, tmp_path: Path) -> None:
    assert f"memproxy listening on {tour_proxy.url}" in tour_proxy.log()
    run = run_tour(readme_blocks()[1:], tour_proxy.port, tmp_path)
    out = run.outputs()
    assert run.returncode == 0, f"the tour stopped in block {list(out)[-1]!r}:\n{run.stdout}\n{run.stderr}"
    key, cid = out["env"]
    headers = {"x-api-key": key}
    try:
        assert out["key"] == ["ok"] and key.startswith("gm_")

        # ml-commons with curl: the memory is written, and the semantic search finds it first.
        added, found = out["ml-commons-curl"]
        assert UUID.fullmatch(added)
        hits = json.loads(found)["hits"]["hits"]
        assert hits[0]["_source"]["memory"] == "The user only drinks green tea."
        # opensearch-py: the container by name, then the memory it wrote.
        assert out["ml-commons-python"] == ["tour", "The user is allergic to peanuts."]
        # The GoodMem SDK finds the memory it wrote into the ml-commons container first.
        texts = ast.literal_eval(out["goodmem-python"][0])
        assert texts[0] == "The user's cat is called Miso."
        assert {"The user only drinks green tea.", "The user is allergic to peanuts."} <= set(texts)

        # GoodMem with curl: created processed, then an NDJSON stream, then an SSE stream.
        lines = out["goodmem-curl"]
        assert lines[0] == "COMPLETED"
        sse_at = next(i for i, line in enumerate(lines) if line.startswith("event:"))
        events = _json_lines(lines[1:sse_at])
        assert events[0]["resultSetBoundary"]["kind"] == "BEGIN"
        assert events[-1]["resultSetBoundary"]["kind"] == "END"
        chunks = [e["retrievedItem"]["chunk"]["chunk"]["chunkText"] for e in events if "retrievedItem" in e]
        assert chunks[0] == "The user works night shifts on Tuesdays." and len(chunks) == 2
        sse = lines[sse_at:]
        data = _json_lines([line.removeprefix("data: ") for line in sse if line.startswith("data: ")])
        sse_chunks = [d["retrievedItem"]["chunk"]["chunk"]["chunkText"] for d in data if "retrievedItem" in d]
        assert sse_chunks == ["The user only drinks green tea."]
        assert sse[-2:] == ["event: close", 'data: {"type":"completed"}']

        # The console: signed in (303 to the console), and its page of the container answers 200.
        assert out["console"] == ["303", "200"]

        # The CLI: its help, both files in, and the search's best hit is the note asked about.
        cli = out["cli"]
        assert cli[0].startswith("usage: memproxy ingest") and any("--space ID" in line for line in cli)
        assert "created 2, skipped 0, failed 0" in cli
        table = cli[cli.index("created 2, skipped 0, failed 0") + 1 :]
        assert table[0].split() == ["SCORE", "ID", "TEXT"] and "Standup is at 9:15" in table[1]

        # What the tour claims, seen through the API afterwards: every memory it wrote is in one space.
        listed = httpx.get(f"{tour_proxy.url}/v1/spaces/{cid}/memories", headers=headers, timeout=30)
        assert listed.status_code == 200, listed.text
        assert len(listed.json()["memories"]) == 6
    finally:
        httpx.delete(f"{tour_proxy.url}/v1/spaces/{cid}", headers=headers, timeout=60)
