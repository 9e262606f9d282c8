"""The console's pictures without a node: the charts' geometry, PCA and near-duplicates, the bucket widths,
and the SVG the templates draw from them (parsed as XML, escaping included)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import numpy as np
import pytest

from proxy.api.console.charts import Scale, nice_ticks, score_curve, timeline_chart
from proxy.api.console.render import ConsoleState
from proxy.api.console.vector_map import DUPLICATE_COSINE, build_map, near_duplicates, pca_2d
from proxy.core.inspection import Series, Timeline, VectorSample, bucket_interval

SVG = "{http://www.w3.org/2000/svg}"
MINUTE = 60_000


def draw(macro: str, *args: Any) -> ET.Element:
    """One macro of templates/_pictures.html, rendered by the console's own (autoescaping) environment."""
    module = ConsoleState().env.get_template("_pictures.html").module
    html = str(getattr(module, macro)(*args))
    return ET.fromstring(html)


def test_nice_ticks_cover_the_range_in_round_steps() -> None:
    assert nice_ticks(0, 10) == [0, 2, 4, 6, 8, 10]
    assert nice_ticks(0.52, 0.97) == [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    ticks = nice_ticks(3, 3)  # one value: padded around it
    assert ticks[0] < 3 < ticks[-1]
    with pytest.raises(ValueError):
        nice_ticks(0, float("inf"))


def test_bucket_widths_are_readable_and_cover_the_span() -> None:
    assert bucket_interval(10_000, 30) == 1000
    assert bucket_interval(2 * 3_600_000, 30) == 5 * MINUTE  # 2 h / 30 = 4 min → 5 min
    assert bucket_interval(365 * 86_400_000, 30) == 30 * 86_400_000
    span = 10 * 365 * 86_400_000
    assert span / bucket_interval(span, 30) <= 30


def test_the_timeline_has_one_line_per_series_with_a_point_per_bucket() -> None:
    starts = [i * MINUTE for i in range(5)]
    timeline = Timeline(
        starts, MINUTE, [Series("working", [0, 1, 2, 0, 4]), Series("long-term", [3, 3, 3, 3, 3])]
    )
    chart = timeline_chart(timeline)
    assert [line.name for line in chart.lines] == ["working", "long-term"]
    assert all(len(line.dots) == 5 for line in chart.lines)
    # Zero sits on the x axis; the biggest count at or under the top tick.
    zero = chart.lines[0].dots[0]
    assert zero.y == pytest.approx(chart.bottom)
    assert chart.top <= chart.lines[0].dots[4].y < chart.bottom
    assert chart.x_ticks[0].label == "01-01 00:00"  # minute buckets: day and time
    svg = draw("timeline", chart)
    groups = svg.findall(f".//{SVG}g")
    assert [g.get("data-series") for g in groups] == ["working", "long-term"]
    assert len(svg.findall(f".//{SVG}polyline")) == 2
    legend = ["".join(li.itertext()) for li in svg.iter("li")]
    assert legend == ["working", "long-term"]


def test_the_score_curve_puts_the_cut_line_at_its_value_and_marks_what_falls_below() -> None:
    chart = score_curve([0.91, 0.84, 0.80, 0.62], cut=0.8)
    assert chart.cut is not None
    (line,) = chart.lines
    by_score = {0.91: line.dots[0], 0.80: line.dots[2], 0.62: line.dots[3]}
    # The rule is drawn exactly where a hit of score 0.8 is.
    assert chart.cut.y == pytest.approx(by_score[0.80].y)
    assert by_score[0.91].y < chart.cut.y < by_score[0.62].y  # SVG y grows downwards
    assert [d.css for d in line.dots] == ["kept", "kept", "kept", "cut"]
    assert chart.notes == ["3 of 4 hits at or above min_score 0.8"]
    # A cut above every hit still lies inside the plot.
    high = score_curve([0.5, 0.4], cut=0.9, cut_name="relevance_threshold")
    assert high.cut is not None and high.top <= high.cut.y <= high.bottom
    svg = draw("score_curve", chart)
    assert len(svg.findall(f".//{SVG}circle")) == 4
    assert len(svg.findall(f".//{SVG}circle[@class='hit-dot cut']")) == 1
    rule = svg.find(f".//{SVG}g[@class='cut-line']/{SVG}line")
    assert rule is not None and float(rule.get("y1", "nan")) == pytest.approx(chart.cut.y, abs=0.05)


def test_pca_finds_the_direction_of_most_variance() -> None:
    rng = np.random.default_rng(1)
    along = rng.standard_normal(500) * 10
    across = rng.standard_normal(500)
    direction = np.zeros(8)
    direction[3] = 1.0
    other = np.zeros(8)
    other[5] = 1.0
    vectors = along[:, None] * direction + across[:, None] * other + 0.01 * rng.standard_normal((500, 8))
    coords, (first, second) = pca_2d(vectors)
    assert coords.shape == (500, 2)
    assert first > 0.95 and 0 < second < first
    assert abs(np.corrcoef(coords[:, 0], along)[0, 1]) > 0.999
    assert abs(np.corrcoef(coords[:, 1], across)[0, 1]) > 0.99
    empty, explained = pca_2d(np.zeros((0, 4)))
    assert empty.shape == (0, 2) and explained == (0.0, 0.0)


def test_near_duplicates_are_pairs_above_the_cosine_threshold() -> None:
    a = np.array([1.0, 0.0, 0.0])
    near = np.array([1.0, 0.1, 0.0])  # cosine 0.995
    far = np.array([1.0, 1.0, 0.0])  # cosine 0.707
    zero = np.zeros(3)
    vectors = np.vstack([a, far, near, zero, 5 * a])
    assert near_duplicates(vectors, DUPLICATE_COSINE) == [(0, 2), (0, 4), (2, 4)]
    assert near_duplicates(vectors, 0.999) == [(0, 4)]


def _sample(vectors: list[list[float]], texts: list[str]) -> VectorSample:
    return VectorSample(
        "idx", "memory_embedding", [f"m{i}" for i in range(len(vectors))], texts, vectors, 1000
    )


def test_the_map_links_every_point_and_escapes_its_tooltip() -> None:
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((40, 16)).tolist()
    vectors.append(list(vectors[0]))  # a stored-twice memory
    texts = [f"memory {i}" for i in range(40)] + ['<script>alert("x")</script> & more']
    drawn = build_map(_sample(vectors, texts))
    assert len(drawn.points) == 41 and drawn.duplicates == 2 and drawn.total == 1000
    assert {p.id for p in drawn.points if p.duplicate} == {"m0", "m40"}
    assert all(0 <= p.x <= drawn.size and 0 <= p.y <= drawn.size for p in drawn.points)
    html = str(
        ConsoleState().env.get_template("_pictures.html").module.vector_map(drawn, "c/1")  # type: ignore[attr-defined]
    )
    assert "<script>" not in html and "&lt;script&gt;" in html
    svg = ET.fromstring(html)
    links = svg.findall(f".//{SVG}a")
    assert len(links) == 41
    assert links[0].get("href") == "/_memproxy/console/containers/c/1/memories/long-term/m0"
    assert [a.get("data-memory-id") for a in links if "duplicate" in (a.get("class") or "")] == ["m0", "m40"]
    title = links[40].find(f"{SVG}title")
    assert title is not None and title.text == '<script>alert("x")</script> & more'
    assert len(svg.findall(f".//{SVG}line[@class='pair']")) == 1


def test_the_map_keeps_vectors_of_the_first_ones_length_and_survives_one_point() -> None:
    drawn = build_map(_sample([[1.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5]], ["a", "b", "c"]))
    assert [p.id for p in drawn.points] == ["m0", "m2"]
    single = build_map(_sample([[0.3, 0.4]], ["only"]))
    assert len(single.points) == 1 and single.pairs == [] and not single.points[0].duplicate


def test_scale_maps_linearly_and_centres_a_point_domain() -> None:
    assert Scale(0, 10, 100, 200)(5) == 150
    assert Scale(3, 3, 100, 200)(3) == 150


def test_relevance_threshold_is_retrieves_option_and_a_finite_number() -> None:
    from proxy.api.console.playground import parse_query
    from proxy.errors import BadRequest

    retrieve = parse_query({"container": "c", "mode": "retrieve", "query": "q", "relevance_threshold": "0.7"})
    assert retrieve.relevance_threshold == 0.7 and retrieve.min_score is None
    semantic = parse_query({"container": "c", "mode": "semantic", "query": "q", "min_score": "0.5"})
    assert semantic.min_score == 0.5 and semantic.relevance_threshold is None
    for form, message in (
        ({"mode": "semantic", "relevance_threshold": "0.7"}, "relevance_threshold is GoodMem retrieve's"),
        ({"mode": "retrieve", "relevance_threshold": "high"}, "relevance_threshold must be a number"),
        ({"mode": "retrieve", "relevance_threshold": "nan"}, "relevance_threshold must be a finite number"),
    ):
        with pytest.raises(BadRequest, match=message):
            parse_query({"container": "c", "query": "q", **form})
