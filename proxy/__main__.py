"""``python -m proxy`` / ``memproxy``: run the proxy in the foreground (``memproxy [serve] [flags]``), or one
of the client commands of :mod:`proxy.cli` (``memproxy ingest|search|inspect|export|import ...``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from proxy.cli import COMMANDS, HELP_FLAGS, overview, run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # ``memproxy ingest ...`` and the other client commands (proxy.cli); anything else runs the server, as
    # ``memproxy [flags]`` always has, and ``memproxy serve [flags]`` says so explicitly.
    if args[:1] and args[0] in HELP_FLAGS:
        print(overview())
        sys.exit(0)
    if args and args[0] in COMMANDS:
        sys.exit(run(args))
    if args[:1] == ["migrate-layout"]:
        sys.exit(_migrate_layout(args[1:]))
    if args[:1] == ["root-key"]:
        sys.exit(_root_key(args[1:]))
    _serve(args[1:] if args[:1] == ["serve"] else args)


def _serve(argv: Sequence[str]) -> None:
    # Imported here, not above: a client command must not pay for the server's imports.
    from proxy.serve import serve

    serve(argv)


def _migrate_layout(argv: Sequence[str]) -> int:
    """``memproxy migrate-layout INDEX... [--suffix S] [--batch N] [server flags]``: move legacy memory
    indices into the routed layout (proxy.store.migrate; docs/data-model.md). It talks to OpenSearch with
    the server's own connection flags; run it again after any failure to resume."""
    import argparse
    import asyncio
    import json

    from proxy.config import parse_settings
    from proxy.store.client import Store
    from proxy.store.migrate import DEFAULT_SUFFIX, migrate_layout

    own = argparse.ArgumentParser(prog="memproxy migrate-layout")
    own.add_argument("indices", nargs="+", metavar="INDEX", help="memory index names to migrate")
    own.add_argument("--suffix", default=DEFAULT_SUFFIX, help="the new index is INDEX-SUFFIX")
    own.add_argument("--batch", type=int, default=500, help="documents per copy request")
    opts, rest = own.parse_known_args(argv)
    settings = parse_settings(rest)

    async def go() -> int:
        store = Store(settings)
        try:
            for index in opts.indices:
                report = await migrate_layout(store, index, suffix=opts.suffix, batch=opts.batch)
                print(json.dumps(report.__dict__), flush=True)
        finally:
            await store.close()
        return 0

    return asyncio.run(go())


def _root_key(argv: Sequence[str]) -> int:
    # The GoodMem core is the GoodMem slice's own (tests/test_architecture.py): the command lives there.
    from proxy.api.goodmem.root_key import root_key

    return root_key(argv)


if __name__ == "__main__":
    main()
