"""``memproxy <command>``: the command-line client of a running memproxy (docs/cli.md).

``memproxy ingest | search | inspect | export | import`` talk to a memproxy over HTTP (``--url``, env
``MEMPROXY_URL``; ``--api-key``, env ``MEMPROXY_API_KEY``). Exit codes scripts can trust: 0 ok, 1 some items
failed or the API refused the request, 2 a usage error, 3 memproxy cannot be reached or refused the key.
Errors print the API's own message on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import proxy.cli.export as export
import proxy.cli.importer as importer
import proxy.cli.ingest as ingest
import proxy.cli.inspect as inspect
import proxy.cli.search as search
from proxy.cli.client import DEFAULT_URL, Api, CliError, env_default

__all__ = ["COMMANDS", "HELP_FLAGS", "overview", "run"]

_MODULES = {"ingest": ingest, "search": search, "inspect": inspect, "export": export, "import": importer}
COMMANDS = frozenset(_MODULES)

_EXIT_CODES = """exit codes: 0 ok; 1 some items failed or the API refused the request; 2 usage error;
3 cannot connect to memproxy, or the API key was refused."""
_EPILOG = (
    _EXIT_CODES + "\n\nmemproxy serve [server flags] (or memproxy [server flags]) runs the server itself."
)


# ``memproxy --help`` (and ``-h``, ``help``) as the first word: the commands; any later ``--help`` belongs to
# the command or, for the server, lists its flags.
HELP_FLAGS = frozenset({"-h", "--help", "help"})


def overview() -> str:
    """What ``memproxy --help`` prints: every command with its one line, the server first."""
    lines = [
        "usage: memproxy [serve] [server flags]",
        "       memproxy COMMAND [--help] ...",
        "",
        "commands:",
        f"  {'serve':<8}  run the memproxy server (the default: a bare 'memproxy [flags]' serves too);",
        f"  {'':<8}  'memproxy serve --help' lists its flags",
        "  migrate-layout",
        f"  {'':<8}  move memory indices into the routed layout (docs/data-model.md); server flags",
        f"  {'root-key':<8}  print a new API key of the GoodMem root user (a lost root key); server flags",
    ]
    # The client commands' one-liners are the ``help`` each module gave its subparser (argparse keeps them
    # on the subparsers action), so this list cannot drift from the commands themselves.
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    lines += [f"  {choice.dest:<8}  {choice.help}" for choice in sub._choices_actions]
    lines += ["", "'memproxy COMMAND --help' explains one command, with examples.", "", _EXIT_CODES]
    return "\n".join(lines)


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    conn = common.add_argument_group("connection")
    conn.add_argument(
        "--url",
        default=env_default("MEMPROXY_URL", DEFAULT_URL),
        help=f"memproxy's base URL (env MEMPROXY_URL; default {DEFAULT_URL})",
    )
    conn.add_argument(
        "--api-key",
        default=env_default("MEMPROXY_API_KEY"),
        help="a GoodMem API key, sent as x-api-key (env MEMPROXY_API_KEY)",
    )
    return common


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="memproxy",
        description="Command-line client of a running memproxy.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()
    for module in _MODULES.values():
        module.add_parser(sub, common, _EPILOG)
    return top


def run(argv: Sequence[str]) -> int:
    """Run one command line (``argv[0]`` is the command); the exit code. Usage errors exit 2 (argparse)."""
    args = parser().parse_args(list(argv))
    try:
        return asyncio.run(_run(args))
    except CliError as exc:
        print(f"memproxy {args.command}: {exc.message}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


async def _run(args: argparse.Namespace) -> int:
    async with Api(args.url, args.api_key) as api:
        code: int = await args.run(args, api)
        return code
