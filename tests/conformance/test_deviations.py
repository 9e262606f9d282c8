"""The deviations the suite asserts are exactly the ones docs/opensearch-api.md lists (no silent drift)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conformance.deviations import DEVIATION_LIST

DOC = Path(__file__).resolve().parents[2] / "docs" / "opensearch-api.md"


def test_deviations_are_documented() -> None:
    text = DOC.read_text()
    section = text.split("## Deviations from ml-commons 3.6", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M)
    assert sorted(documented) == sorted(d.id for d in DEVIATION_LIST)
    assert len({d.id for d in DEVIATION_LIST}) == len(DEVIATION_LIST)
