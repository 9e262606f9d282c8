"""``python -m proxy`` / ``memproxy``: run the proxy in the foreground (``memproxy [serve] [flags]``), or one
of the client commands of :mod:`proxy.cli` (``memproxy ingest|search|inspect|export|import ...``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from proxy.cli import COMMANDS, run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    # ``memproxy ingest ...`` and the other client commands (proxy.cli); anything else runs the server, as
    # ``memproxy [flags]`` always has, and ``memproxy serve [flags]`` says so explicitly.
    if args and args[0] in COMMANDS:
        sys.exit(run(args))
    _serve(args[1:] if args[:1] == ["serve"] else args)


def _serve(argv: Sequence[str]) -> None:
    # Imported here, not above: a client command must not pay for the server's imports.
    from proxy.serve import serve

    serve(argv)


if __name__ == "__main__":
    main()
