"""``memproxy root-key [server flags]``: a new API key of the GoodMem root user, printed on stdout.

``POST /v1/system/init`` answers the first root key once per cluster; this is the operator's way back to a
lost one. It reaches OpenSearch directly with the server's own connection flags (as ``memproxy
migrate-layout`` does), so it needs the cluster credentials memproxy runs with, which can write memproxy's
indices anyway: it grants nothing its user does not hold already.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from proxy.config import parse_settings
from proxy.core.cache import Caches
from proxy.core.goodmem.system import issue_root_key
from proxy.core.identity import Identity
from proxy.errors import NotFound
from proxy.store.client import Store

__all__ = ["root_key"]


def root_key(argv: Sequence[str]) -> int:
    """Run the command; its exit code (1: the cluster was never initialised, or has no root user)."""
    own = argparse.ArgumentParser(
        prog="memproxy root-key",
        description="Print a new API key of the GoodMem root user (POST /v1/system/init answers the first "
        "one once per cluster: this is the way back to a lost one). It reaches OpenSearch directly with the "
        "server's connection flags (--opensearch-url and the rest; 'memproxy serve --help'), so it needs "
        "the cluster credentials memproxy itself runs with.",
    )
    _, rest = own.parse_known_args(argv)
    settings = parse_settings(rest)

    async def go() -> int:
        store = Store(settings)
        try:
            key = await issue_root_key(Identity.create(store, Caches.with_ttl(0)))
        except NotFound as exc:
            hint = "POST /v1/system/init creates the root user"
            print(f"memproxy root-key: {exc.message} ({hint})", file=sys.stderr)
            return 1
        finally:
            await store.close()
        print(key.raw_key)
        return 0

    return asyncio.run(go())
