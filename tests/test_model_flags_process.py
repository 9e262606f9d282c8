"""Models named at start-up, as an operator names them: the real ``python -m proxy`` with ``--reranker`` and
``--llm`` flags, a key taken from the environment, and flags that cannot work refused before serving."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, ProxyProcess
from tests.support.fake_llm import FakeLLM
from tests.test_local_reranker import _write_cross_encoder

pytestmark = pytest.mark.node

KEY = "sk-startup-SECRET-7781"


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


def test_start_up_models_are_served_and_their_keys_never_shown(
    opensearch_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    model_dir = _write_cross_encoder(tmp_path / "ce")
    proxy = ProxyProcess(
        opensearch_url,
        [
            "--reranker",
            f"ce={model_dir}",
            "--llm",
            f"chat={llm.url}#provider=openai,model=fake-llm,key_env=MEMPROXY_TEST_LLM_KEY",
        ],
        env={"MEMPROXY_TEST_LLM_KEY": KEY},
    )
    try:
        with urllib.request.urlopen(proxy.url + "/_memproxy/health") as resp:
            raw = resp.read().decode()
        models = {m["id"]: m for m in json.loads(raw)["proxy"]["models"]}
        assert models["chat"] == {"id": "chat", "kind": "llm", "provider": "openai", "endpoint": llm.url}
        assert models["ce"] == {"id": "ce", "kind": "reranker", "provider": "local"}
        assert KEY not in raw
    finally:
        proxy.stop()
    assert KEY not in proxy.log()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--llm", "x=/not/a/url"], "memproxy: --llm x: an LLM is reached over HTTP"),
        (["--llm", "x=http://127.0.0.1:1#provider=openai"], "needs model=NAME"),
        (
            ["--reranker", "r=http://127.0.0.1:1#provider=cohere,model=m,key_env=MEMPROXY_UNSET_KEY"],
            "not set",
        ),
        (["--reranker", "r=/no/such/cross-encoder"], "memproxy: cannot load"),
        (["--embedder", "e=/no/such/embedder"], "memproxy: cannot load"),
    ],
)
def test_flags_that_cannot_work_stop_the_start(opensearch_url: str, flags: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "--opensearch-url", opensearch_url, "--port", "1", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    assert message in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
