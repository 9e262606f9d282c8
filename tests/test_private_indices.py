"""Every index name the pass-through excludes from an index-less view is created at start-up, so the view
names something even with ``allow_no_indices=false`` on a brand-new cluster (proxy.store.private)."""

from fnmatch import fnmatchcase

import pytest

from proxy.api.passthrough import PRIVATE_INDICES
from proxy.store.private import STARTUP_INDICES


@pytest.mark.parametrize("pattern", PRIVATE_INDICES)
def test_each_excluded_pattern_has_an_index_made_at_start_up(pattern: str) -> None:
    assert any(fnmatchcase(name, pattern) for name in STARTUP_INDICES), (
        f"{pattern} is excluded from index-less views but nothing matching it is created at start-up: "
        "add one to proxy.store.private.STARTUP_INDICES"
    )


def test_no_start_up_index_is_public() -> None:
    for name in STARTUP_INDICES:
        assert any(fnmatchcase(name, pattern) for pattern in PRIVATE_INDICES), name
