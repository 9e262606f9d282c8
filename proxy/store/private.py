"""memproxy's private indices, created at start-up: one for each name the pass-through excludes.

An index-less metadata view (``GET /_field_caps``, ``/_flush``, ...) is forwarded as ``*,-memproxy-jobs*,...``
(``proxy.api.passthrough.PRIVATE_INDICES``), and with ``allow_no_indices=false`` the node answers 404 to an
exclusion that matches nothing. So on a brand-new cluster every excluded name must exist before the first
caller's view, not only once a write has needed it.
"""

from __future__ import annotations

from proxy.store.client import Store
from proxy.store.containers import CONTAINER_INDEX, ensure_container_index
from proxy.store.goodmem import SYSTEM, GoodMemIndices
from proxy.store.jobs import JOBS, JobDocs
from proxy.store.models import MODELS, ModelDocs
from proxy.store.settings import SETTINGS_INDEX, SettingsDocs

__all__ = ["STARTUP_INDICES", "ensure_private_indices"]

STARTUP_INDICES = (CONTAINER_INDEX, SYSTEM, JOBS, MODELS, SETTINGS_INDEX)


async def ensure_private_indices(store: Store) -> None:
    await ensure_container_index(store)
    await GoodMemIndices(store).ensure(SYSTEM)
    await JobDocs(store).ensure()
    await ModelDocs(store).ensure(MODELS)
    await SettingsDocs(store).ensure()
