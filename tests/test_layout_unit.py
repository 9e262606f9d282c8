"""The memory-index layout without a node: the settings that choose it and the index bodies it renders."""

from __future__ import annotations

import pytest

from proxy.config import parse_settings
from proxy.store.templates import MEMORY_TEMPLATES, MemoryLayout, render_index_body

_SYSTEM_TEMPLATES = ("containers", "jobs", "models", "goodmem_apikeys", "goodmem_users", "goodmem_embedders")


def _settings(kind: str, **kwargs: object) -> dict[str, object]:
    vectors = [{"name": "memory_embedding", "dimension": 4}] if kind == "long_term" else []
    body = render_index_body(kind, vector_fields=vectors, **kwargs)  # type: ignore[arg-type]
    settings: dict[str, object] = body["settings"]["index"]
    return settings


def test_defaults_are_one_primary_and_one_replica() -> None:
    s = parse_settings([], environ={})
    assert (s.memory_shards, s.memory_replicas) == (1, 1)


def test_flags_win_over_environment() -> None:
    env = {"MEMPROXY_MEMORY_SHARDS": "6", "MEMPROXY_MEMORY_REPLICAS": "2"}
    assert parse_settings([], environ=env).memory_shards == 6
    s = parse_settings(["--memory-shards", "3", "--memory-replicas", "0"], environ=env)
    assert (s.memory_shards, s.memory_replicas) == (3, 0)


@pytest.mark.parametrize(
    "argv", [["--memory-shards", "0"], ["--memory-shards", "2000"], ["--memory-replicas", "-1"]]
)
def test_bad_layout_is_refused_at_start_up(argv: list[str]) -> None:
    with pytest.raises(SystemExit, match="memory-"):
        parse_settings(argv, environ={})


@pytest.mark.parametrize("kind", sorted(MEMORY_TEMPLATES))
def test_memory_indices_follow_the_layout(kind: str) -> None:
    settings = _settings(kind, layout=MemoryLayout(shards=3, replicas=1))
    assert settings["number_of_shards"] == "3"
    assert settings["number_of_replicas"] == "1"
    assert "auto_expand_replicas" not in settings


@pytest.mark.parametrize("kind", _SYSTEM_TEMPLATES)
def test_small_system_indices_keep_one_copy_per_node(kind: str) -> None:
    settings = _settings(kind, layout=MemoryLayout(shards=3, replicas=1))
    assert settings["number_of_shards"] == "1"
    assert settings["auto_expand_replicas"] == "0-all"


def test_a_containers_own_index_settings_win() -> None:
    own = {"index": {"number_of_shards": "5", "auto_expand_replicas": "0-1"}, "index.refresh_interval": "5s"}
    settings = _settings("working", index_settings=own, layout=MemoryLayout(shards=3, replicas=1))
    assert settings == {"number_of_shards": "5", "auto_expand_replicas": "0-1", "refresh_interval": "5s"}
    replicas = _settings("long_term", index_settings={"number_of_replicas": 2}, layout=MemoryLayout(3, 1))
    assert (replicas["number_of_shards"], replicas["number_of_replicas"]) == ("3", 2)
    assert replicas["knn"] is True
