"""The OpenSearch API specification's own test stories (``_core``, ``indices``, ``cat``), run against the
node and through memproxy with an administrator key: every story that passes on the node passes through
memproxy, except the refusals the pass-through policy documents (:data:`REFUSED_BY_POLICY`), which must
be memproxy's own 403."""

from __future__ import annotations

import pytest

from tests.passthrough_stories import run_story, stories

pytestmark = pytest.mark.timeout(1200)

_INDEXLESS = "an index-less search would search memproxy's own indices too"
_OWN_CONTEXTS = "listing every point in time would list memproxy's own"
REFUSED_BY_POLICY: dict[str, str] = {
    "_core/count.yaml": _INDEXLESS + " (`GET /_count`)",
    "_core/rank_eval.yaml": _INDEXLESS + " (`GET /_rank_eval`)",
    "_core/search.yaml": _INDEXLESS + " (`GET /_search`)",
    "_core/validate/query.yaml": _INDEXLESS + " (`GET /_validate/query`)",
    "_core/search/point_in_time/all.yaml": _OWN_CONTEXTS + " (`GET /_search/point_in_time/_all`)",
    "cat/pit_segments/all.yaml": _OWN_CONTEXTS + " (`GET /_cat/pit_segments/_all`)",
    "cat/tasks.yaml": "task descriptions hold memproxy's own requests too (`GET /_cat/tasks?detailed`)",
}


def test_stories_pass_through_memproxy(
    opensearch_url: str, proxy_url: str, admin_headers: dict[str, str]
) -> None:
    on_node, through, refused, lost = 0, 0, [], []
    for story in stories():
        if run_story(story, opensearch_url, {}) is not None:
            continue  # not this node's to pass (a plugin, a version, a setting it lacks)
        on_node += 1
        problem = run_story(story, proxy_url, admin_headers)
        if problem is None:
            through += 1
        elif story.name in REFUSED_BY_POLICY and "security_exception" in problem:
            refused.append(story.name)
        else:
            lost.append(f"{story.name}: {problem}")
    print(
        f"\nstories: {on_node} pass on the node, {through} through memproxy, {len(refused)} refused by policy"
    )
    assert lost == [], "\n".join(lost)
    assert sorted(refused) == sorted(REFUSED_BY_POLICY), "a documented refusal no longer happens"
    assert on_node >= 100
