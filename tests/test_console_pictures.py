"""The console's pictures in the real browser (Debian's chromium, as in tests/test_console.py): memories over
time on a container's page, a playground query's score curve with its cut, and the map of a container's
vectors with its near-duplicates, each point a link. ``MEMPROXY_SCREENSHOTS=1`` also saves the three
pictures to ``docs/img/console-{timeline,score-curve,vector-map}.png``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.test_console import (
    CONSOLE,
    IMG,
    MC,
    SCREENSHOTS,
    SPACE_MEMORIES,
    World,
    _ok,
    all_css,
    browser,  # noqa: F401 (a fixture)
    by_css,
    choose,
    click_and_wait,
    fill,
    sign_in,
    world,  # noqa: F401 (a fixture)
)

TWIN = "Alice waters the tomato plants on her balcony every evening."
SCRIPT = '<script>document.title="pwned"</script> Alice keeps a spare key under the mat.'
TOPICS = {
    "tea": ["green tea", "jasmine tea", "oolong tea", "mint tea", "chamomile tea", "earl grey tea"],
    "sport": ["running", "cycling", "swimming", "rowing", "climbing", "tennis"],
    "music": ["the cello", "the piano", "the violin", "the flute", "the drums", "the guitar"],
    "work": ["the hospital", "the bakery", "the library", "the school", "the bank", "the airport"],
}
PHRASES = {
    "tea": "Alice drinks {} in the afternoon.",
    "sport": "Alice goes {} at the weekend.",
    "music": "Alice is learning to play {}.",
    "work": "Alice works at {} downtown.",
}
MAP_TEXTS = [PHRASES[t].format(v) for t, vs in TOPICS.items() for v in vs] + [TWIN, TWIN, SCRIPT]


@dataclass
class Mapped:
    container_id: str
    ids: dict[str, list[str]]  # text -> the ids of its memories


@pytest.fixture(scope="module")
def mapped(world: World) -> Iterator[Mapped]:  # noqa: F811
    """An ml-commons container whose long-term memories fall in four topics, one stored twice and one
    holding markup."""
    with httpx.Client(base_url=world.url, headers={"x-api-key": world.key}, timeout=300) as api:
        container_id = _ok(
            api.post(
                f"{MC}/_create",
                json={
                    "name": f"console-map-{world.tag}",
                    "configuration": {
                        "embedding_model_type": "TEXT_EMBEDDING",
                        "embedding_model_id": "all-MiniLM-L6-v2",
                        "embedding_dimension": 384,
                        "index_prefix": f"console-{world.tag}",  # the index of world.container_id
                        "use_system_index": False,
                    },
                },
            )
        )["memory_container_id"]
        memories = [{"memory": t, "namespace": {"user_id": "alice"}} for t in MAP_TEXTS]
        _ok(api.post(f"{MC}/{container_id}/memories/long-term/_memproxy_bulk", json={"memories": memories}))
        found = _ok(
            api.post(
                f"{MC}/{container_id}/memories/long-term/_search",
                json={"query": {"match_all": {}}, "size": 100},
            )
        )
        ids: dict[str, list[str]] = {}
        for hit in found["hits"]["hits"]:
            ids.setdefault(hit["_source"]["memory"], []).append(hit["_id"])
        assert sum(len(v) for v in ids.values()) == len(MAP_TEXTS)
        yield Mapped(container_id, ids)
        api.delete(f"{MC}/{container_id}", params={"delete_all_memories": "true"})


def picture(driver: Any, selector: str, name: str) -> None:
    """Save one picture (its element alone) for the docs."""
    if not SCREENSHOTS:
        return
    IMG.mkdir(parents=True, exist_ok=True)
    element = by_css(driver, selector)
    driver.execute_script("arguments[0].scrollIntoView()", element)
    element.screenshot(str(IMG / f"console-{name}.png"))


def counts_per_series(driver: Any) -> dict[str, int]:
    """Each series' memories, summed from its points' tooltips ("long-term: 3 created in ...")."""
    totals: dict[str, int] = {}
    for group in all_css(driver, "#timeline g.series"):
        name = group.get_attribute("data-series")
        titles = [t.get_attribute("textContent") for t in group.find_elements("css selector", "circle title")]
        counts = [re.search(r": (\d+) created", t) for t in titles]
        assert all(counts), titles
        totals[name] = sum(int(m.group(1)) for m in counts if m is not None)
    return totals


def test_the_container_page_charts_memories_over_time_per_type(world: World, browser: Any) -> None:  # noqa: F811
    sign_in(browser, world.url, world.key)
    browser.get(world.url + CONSOLE + f"/containers/{world.container_id}")
    assert counts_per_series(browser) == {"sessions": 0, "working": 0, "long-term": 5, "history": 0}
    legend = [li.text for li in all_css(browser, "#timeline-legend li")]
    assert legend == ["sessions", "working", "long-term", "history"]
    assert by_css(browser, "#timeline .x-label").text.startswith("created_time (UTC)")
    assert by_css(browser, "#timeline .y-label").text == "memories created"
    # Every series has one point per bucket, on the same x positions.
    xs = [
        [c.get_attribute("cx") for c in g.find_elements("css selector", "circle")]
        for g in all_css(browser, "#timeline g.series")
    ]
    assert len({tuple(x) for x in xs}) == 1 and len(xs[0]) >= 1

    # A GoodMem space: its memory records are a series of their own, beside their chunks (long-term).
    browser.get(world.url + CONSOLE + f"/containers/{world.space_id}")
    counts = counts_per_series(browser)
    assert counts["GoodMem memories"] == len(SPACE_MEMORIES)
    assert counts["long-term"] >= len(SPACE_MEMORIES)


def test_a_month_of_memories_is_charted_by_day(
    world: World,  # noqa: F811
    mapped: Mapped,
    browser: Any,  # noqa: F811
    opensearch_url: str,
) -> None:
    """Memories written over 27 days (their times set on the node, as an old container has them): one
    point per day, and the points add up to every memory."""
    day = 86_400_000
    now = int(time.time() * 1000)
    index = f"console-{world.tag}-memory-long-term"
    ids = sorted(i for group in mapped.ids.values() for i in group)
    lines = []
    for n, memory_id in enumerate(ids):
        # Older days hold fewer memories: a container that grew.
        at = now - (len(ids) - 1 - n) ** 2 * day // len(ids)
        lines += [
            json.dumps({"update": {"_index": index, "_id": memory_id}}),
            json.dumps({"doc": {"created_time": at, "last_updated_time": at}}),
        ]
    answer = httpx.post(
        f"{opensearch_url}/_bulk",
        params={"refresh": "true"},
        content="\n".join(lines) + "\n",
        headers={"content-type": "application/x-ndjson"},
        timeout=60,
    ).json()
    assert not answer["errors"], answer
    sign_in(browser, world.url, world.key)
    browser.get(world.url + CONSOLE + f"/containers/{mapped.container_id}")
    assert counts_per_series(browser)["long-term"] == len(ids)
    assert "one point per day" in by_css(browser, "#timeline .x-label").text
    points = [c for c in all_css(browser, "#timeline g.series[data-series='long-term'] circle")]
    assert len(points) >= 20
    picture(browser, "#over-time", "timeline")


def _playground(driver: Any, url: str, container_id: str, mode: str, query: str, **fields: str) -> None:
    driver.get(url + CONSOLE + f"/search?container={container_id}")
    choose(driver, "#mode", mode)
    fill(driver, "#query", query)
    for name, value in fields.items():
        fill(driver, "#" + name.replace("_", "-"), value)
    click_and_wait(driver, by_css(driver, "#run-search"))


def _y_of(driver: Any, value: float) -> float:
    """Where ``value`` lies on the score curve's y axis, read from two of its labelled ticks."""
    ticks = [
        (float(t.text), float(t.get_attribute("y")) - 4)  # labels sit 4 units below their tick
        for t in all_css(driver, "#score-curve text.y-tick")
    ]
    (v0, y0), (v1, y1) = ticks[0], ticks[-1]
    return y0 + (value - v0) * (y1 - y0) / (v1 - v0)


def test_the_score_curve_shows_where_min_score_and_the_threshold_cut(world: World, browser: Any) -> None:  # noqa: F811
    sign_in(browser, world.url, world.key)
    _playground(
        browser, world.url, world.container_id, "semantic", "What does Alice drink?", min_score="0.55"
    )
    scores = [float(td.text.split()[0]) for td in all_css(browser, "#hits td.score")]
    dots = all_css(browser, "#score-curve circle.hit-dot")
    assert len(dots) == len(scores) >= 2
    cut = by_css(browser, "#score-curve g.cut-line line")
    cut_y = float(cut.get_attribute("y1"))
    assert cut_y == pytest.approx(_y_of(browser, 0.55), abs=0.5)
    # The node applied min_score: every hit is drawn above the rule, none as cut.
    assert all(float(d.get_attribute("cy")) <= cut_y for d in dots)
    assert all_css(browser, "#score-curve circle.cut") == []
    # Each dot is where its score is, rank by rank.
    for dot, score in zip(dots, scores, strict=True):
        assert float(dot.get_attribute("cy")) == pytest.approx(_y_of(browser, score), abs=0.5)
    assert "min_score 0.55" in by_css(browser, "#score-curve g.cut-line text").text

    # GoodMem retrieve: the threshold is drawn, and the hits under it are marked as cut.
    _playground(browser, world.url, world.space_id, "retrieve", "Which office restarts its VPN gateway?")
    # retrieve's curve draws the cosine (the wire score is -cos under the live convention).
    details = [td.text for td in all_css(browser, "#hits td.score small")]
    scores = [float(re.search(r"cosine (-?[0-9.]+)", d).group(1)) for d in details]  # type: ignore[union-attr]
    assert len(scores) == len(SPACE_MEMORIES) and scores == sorted(scores, reverse=True)
    assert by_css(browser, "#score-curve .y-label").text == "cosine"
    threshold = round((scores[0] + scores[1]) / 2, 4)
    _playground(
        browser,
        world.url,
        world.space_id,
        "retrieve",
        "Which office restarts its VPN gateway?",
        relevance_threshold=str(threshold),
    )
    cut_dots = all_css(browser, "#score-curve circle.cut")
    assert len(cut_dots) == sum(1 for s in scores if s < threshold) == len(scores) - 1
    cut_y = float(by_css(browser, "#score-curve g.cut-line line").get_attribute("y1"))
    assert all(float(d.get_attribute("cy")) > cut_y for d in cut_dots)
    assert f"1 of {len(scores)} hits at or above relevance_threshold" in by_css(browser, "#score-curve").text
    picture(browser, "#score-curve", "score-curve")


def test_the_vector_map_marks_near_duplicates_and_links_each_memory(
    world: World,  # noqa: F811
    mapped: Mapped,
    browser: Any,  # noqa: F811
) -> None:
    sign_in(browser, world.url, world.key)
    browser.get(world.url + CONSOLE + f"/containers/{mapped.container_id}")
    click_and_wait(browser, by_css(browser, "#map-this"))
    points = all_css(browser, "#vector-map a.point")
    assert len(points) == len(MAP_TEXTS)
    by_id = {p.get_attribute("data-memory-id"): p for p in points}
    assert set(by_id) == {i for ids in mapped.ids.values() for i in ids}
    # The memory stored twice, and only it, is drawn as a near-duplicate pair.
    duplicates = {
        p.get_attribute("data-memory-id") for p in all_css(browser, "#vector-map a.point.duplicate")
    }
    assert duplicates == set(mapped.ids[TWIN])
    assert len(all_css(browser, "#vector-map line.pair")) == 1
    assert (
        f"{len(MAP_TEXTS)} of {len(MAP_TEXTS)} long-term memories"
        in by_css(browser, "#vector-map-caption").text
    )
    # Markup in a memory stays text: in the tooltip, and never run (the one script is the console's).
    (script_id,) = mapped.ids[SCRIPT]
    tooltip = by_id[script_id].find_element("css selector", "title").get_attribute("textContent")
    assert tooltip == SCRIPT
    assert "&lt;script&gt;document.title" in browser.page_source
    assert [s.get_attribute("src").rsplit("/", 1)[-1] for s in all_css(browser, "script")] == ["console.js"]
    assert browser.title != "pwned"
    picture(browser, "#vector-map", "vector-map")

    # A point opens its memory's page: the one farthest from any other, so no neighbour's dot covers it.
    dots = {
        i: (float(c.get_attribute("cx")), float(c.get_attribute("cy")))
        for i, p in by_id.items()
        for c in p.find_elements("css selector", "circle")
    }

    def room(i: str) -> float:
        x, y = dots[i]
        return min((x - u) ** 2 + (y - v) ** 2 for j, (u, v) in dots.items() if j != i)

    memory_id = max(dots, key=room)
    (text,) = [t for t, ids in mapped.ids.items() if memory_id in ids]
    click_and_wait(browser, by_id[memory_id].find_element("css selector", "circle"))
    assert browser.current_url.endswith(f"/containers/{mapped.container_id}/memories/long-term/{memory_id}")
    assert by_css(browser, "#memory-id").text == memory_id
    assert by_css(browser, "#memory-text").text == text
    assert "<384 numbers>" in by_css(browser, "#memory-source").text


def test_a_memory_page_of_another_container_is_not_found(world: World, mapped: Mapped) -> None:  # noqa: F811
    """Indices are shared by containers of one prefix: the memory page checks the memory is this one's."""
    with httpx.Client(base_url=world.url, timeout=60, follow_redirects=False) as client:
        assert client.post(CONSOLE + "/login", data={"api_key": world.key}).status_code == 303
        (memory_id,) = mapped.ids[MAP_TEXTS[0]]
        mine = client.get(CONSOLE + f"/containers/{mapped.container_id}/memories/long-term/{memory_id}")
        assert mine.status_code == 200
        other = client.get(CONSOLE + f"/containers/{world.container_id}/memories/long-term/{memory_id}")
        assert other.status_code == 404 and "No long-term memory" in other.text
        missing = client.get(CONSOLE + f"/containers/{mapped.container_id}/memories/long-term/{uuid.uuid4()}")
        assert missing.status_code == 404
        bad_type = client.get(CONSOLE + f"/containers/{mapped.container_id}/memories/nope/{memory_id}")
        assert bad_type.status_code == 400 and "Invalid memory type" in bad_type.text
