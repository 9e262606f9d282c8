"""A private, throw-away PostgreSQL cluster for the tests (the filter differential's third oracle).

Debian's ``postgresql`` package provides the server binaries under ``/usr/lib/postgresql/<major>/bin``; they
are not on PATH. The cluster is ``initdb``-ed into a git-ignored folder under ``.cache/postgres/`` (or, when
that folder is not reachable by the cluster's user, under ``/var/tmp/memproxy-postgres/``), listens only on
a unix socket inside that folder (no TCP port, so nothing can collide with another server), runs with
``TimeZone=UTC`` and ``DateStyle=ISO``, and is stopped and deleted at the end of the session. PostgreSQL
refuses to run as root, so as root the cluster runs as the system user ``memproxy-pg``
(``MEMPROXY_PG_USER``), created with ``useradd --system`` when missing, like ``scripts/opensearch-local`` does
for OpenSearch.

The database is UTF-8 with ``LC_COLLATE=C`` (text compares in code point order, which is byte order in UTF-8)
and ``LC_CTYPE=C.UTF-8`` (``lower``/``upper``/``ILIKE`` map case per code point with glibc's tables).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
PG_USER = os.environ.get("MEMPROXY_PG_USER", "memproxy-pg")
DB_USER = "memproxy"
PORT = 5432  # only names the socket file; the cluster has no TCP listener
MISSING = (
    "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin: install Debian's `postgresql` "
    "package (apt-get install -y postgresql; .ci/run does this). The filter differential uses PostgreSQL "
    "as its independent oracle, so it fails rather than skips without it."
)


def find_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that has ``initdb`` (``PG_BINDIR`` overrides)."""
    override = os.environ.get("PG_BINDIR")
    if override:
        return Path(override) if (Path(override) / "initdb").is_file() else None
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def major(path: str) -> int:
        m = re.search(r"/postgresql/(\d+)/", path)
        return int(m[1]) if m else 0

    return Path(max(found, key=major)).parent if found else None


def _is_root() -> bool:
    return os.geteuid() == 0


def _as_pg_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", PG_USER, "--", *cmd] if _is_root() else cmd


def _reachable(path: Path) -> bool:
    if not _is_root():
        return True
    return subprocess.run(["runuser", "-u", PG_USER, "--", "test", "-x", str(path)]).returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PostgresCluster:
    """``initdb`` + ``pg_ctl start`` on construction; ``stop()`` stops the server and deletes its folder."""

    def __init__(self) -> None:
        bindir = find_bindir()
        if bindir is None:
            raise RuntimeError(MISSING)
        self.bindir = bindir
        if _is_root() and subprocess.run(["id", PG_USER], capture_output=True).returncode != 0:
            subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
                check=True,
            )
        base = REPO / ".cache" / "postgres"
        base.mkdir(parents=True, exist_ok=True)
        if not _reachable(base):  # e.g. a checkout under /root
            digest = hashlib.sha1(str(REPO).encode()).hexdigest()[:12]
            base = Path("/var/tmp/memproxy-postgres") / digest
            base.mkdir(parents=True, exist_ok=True)
        self._reap_stale(base)
        self.home = base / str(os.getpid())
        if len(str(self.home / f".s.PGSQL.{PORT}")) > 100:  # unix socket paths are limited to ~107 bytes
            digest = hashlib.sha1(str(self.home).encode()).hexdigest()[:12]
            self.home = Path("/tmp") / f"memproxy-pg-{digest}"
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        if _is_root():
            shutil.chown(self.home, PG_USER)
        self.data = self.home / "data"
        self.log = self.home / "server.log"
        self._run(
            [
                str(bindir / "initdb"), "-D", str(self.data), "-U", DB_USER, "--auth=trust",
                "--encoding=UTF8", "--locale=C", "--lc-ctype=C.UTF-8", "--no-sync", "--no-instructions",
            ]
        )  # fmt: skip
        options = (
            f"-c listen_addresses='' -c unix_socket_directories='{self.home}' -c port={PORT} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c TimeZone=UTC -c DateStyle=ISO "
            "-c max_connections=10 -c shared_buffers=32MB"
        )
        self._run(
            [str(bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start"]
        )
        self.conninfo = f"host={self.home} port={PORT} user={DB_USER} dbname=postgres"

    def _run(self, cmd: list[str]) -> None:
        done = subprocess.run(_as_pg_user(cmd), capture_output=True, text=True, cwd=self.home)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd[:2])} failed:\n{done.stdout}{done.stderr}{log}")

    @classmethod
    def _reap_stale(cls, base: Path) -> None:
        """Stop and delete clusters left by test sessions that died (each folder is named by its session's
        pid); a live session's cluster is left alone."""
        bindir = find_bindir()
        for home in base.iterdir():
            if not home.name.isdigit() or _pid_alive(int(home.name)):
                continue
            if bindir is not None and (home / "data" / "postmaster.pid").exists():
                pg_ctl = [str(bindir / "pg_ctl"), "-D", str(home / "data"), "-m", "immediate", "stop"]
                subprocess.run(_as_pg_user(pg_ctl), capture_output=True)
            shutil.rmtree(home, ignore_errors=True)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.conninfo, autocommit=True)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run([str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
        shutil.rmtree(self.home, ignore_errors=True)
