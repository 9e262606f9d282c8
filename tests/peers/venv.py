"""The peers' own virtual environment and their published sources, prepared once and reused.

The integrations pull dependency trees memproxy does not want in its own venv (crewai brings chromadb,
lancedb and onnxruntime; langgraph and langchain-tests their own pins), so they get a venv of their own under
the git-ignored ``.cache/peers/``. It is stamped with the hash of everything that decides its content (the
lock, the pinned sdists, the interpreter's version): an unchanged stamp skips the whole preparation, a
changed one rebuilds it from nothing, so a venv never mixes two locks. ``uv`` installs the lock (pip takes
minutes over those ~180 packages on two cores; uv seconds); pip only downloads the sdists, which
``--require-hashes`` checks against the sha256 pinned in ``sdists.txt``.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
HOME = REPO / ".cache" / "peers"
LOCK = HERE / "requirements.txt"
SDISTS = HERE / "sdists.txt"
# The installer of the lock, itself pinned: a newer uv may resolve the same lock's markers differently.
UV = "uv==0.13.9"

__all__ = ["HOME", "PeersVenv", "prepare"]


@dataclass(frozen=True)
class PeersVenv:
    python: Path
    sources: Path  # one folder per sdist, named as the archive: goodmem_langchain-0.3.0/
    seconds: float  # what preparing it took now (0 when the stamp matched)

    def source(self, name: str, version: str) -> Path:
        return self.sources / f"{name.replace('-', '_')}-{version}"


def _stamp() -> str:
    digest = hashlib.sha256()
    for path in (LOCK, SDISTS):
        digest.update(path.read_bytes())
    digest.update(f"{UV} {sys.version_info[:3]}".encode())
    return digest.hexdigest()


@contextmanager
def _locked() -> Iterator[None]:
    """One preparation at a time: another pytest process (or xdist worker) waits, then finds the stamp."""
    HOME.mkdir(parents=True, exist_ok=True)
    with open(HOME / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str | Path], what: str) -> None:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"peers' venv: {what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def _build(venv: Path, sources: Path) -> None:
    # sys.executable is memproxy's venv; a venv made from it is based on the same interpreter.
    _run([sys.executable, "-m", "venv", venv], "creating the venv")
    python = venv / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", UV], f"installing {UV}")
    _run([venv / "bin" / "uv", "pip", "install", "-q", "--python", python, "-r", LOCK], "installing the lock")
    downloads = HOME / "sdists"
    shutil.rmtree(downloads, ignore_errors=True)
    # --no-binary: the sdist, which holds the tests; --require-hashes: sdists.txt's sha256 or nothing.
    download = ["download", "-q", "--no-deps", "--no-binary", ":all:", "--require-hashes"]
    _run([python, "-m", "pip", *download, "-r", SDISTS, "-d", downloads], "downloading the pinned sdists")
    sources.mkdir(parents=True)
    for archive in sorted(downloads.glob("*.tar.gz")):
        with tarfile.open(archive) as tar:
            # "data": no absolute paths, no links out of the folder, no device files.
            tar.extractall(sources, filter="data")


def prepare() -> PeersVenv:
    """The peers' venv and sources, built when missing or stale (under a lock), else as they are."""
    venv, sources, stamp_file = HOME / "venv", HOME / "src", HOME / "stamp"
    with _locked():
        started = time.monotonic()
        stamp = _stamp()
        fresh = stamp_file.is_file() and stamp_file.read_text() == stamp
        if not fresh:
            stamp_file.unlink(missing_ok=True)
            shutil.rmtree(venv, ignore_errors=True)
            shutil.rmtree(sources, ignore_errors=True)
            _build(venv, sources)
            stamp_file.write_text(stamp)
        return PeersVenv(venv / "bin" / "python", sources, 0.0 if fresh else time.monotonic() - started)
