"""A chat server in front of the deterministic LLM (tests/support/fake_llm.py) that holds requests until the
test releases them: a memproxy process can be stopped or killed while it waits on its LLM, in an infer job
or in a GoodMem retrieve's abstract reply (mid-stream).

The first ``hold`` requests are held (``hold`` may be raised or lowered at any time); a released one is
relayed to the target and its answer sent back (to a caller that may be gone by then); every other request
is relayed at once."""

from __future__ import annotations

import http.server
import threading
import urllib.request
from typing import Any

__all__ = ["GatedLLM"]


class GatedLLM:
    def __init__(self, target: str, *, hold: int = 1) -> None:
        self.target = target
        self.hold = hold
        self.first_request = threading.Event()
        self.calls = 0
        self._cond = threading.Condition()
        self._held: list[tuple[bytes, threading.Event]] = []
        self._closed = False
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                released = threading.Event()
                with gate._cond:
                    gate.calls += 1
                    held = gate.calls <= gate.hold and not gate._closed
                    if held:
                        gate._held.append((body, released))
                        gate._cond.notify_all()
                if held:
                    gate.first_request.set()
                    released.wait(120)
                req = urllib.request.Request(
                    gate.target + self.path, data=body, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(req, timeout=30) as resp:
                    answer = resp.read()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    return  # the caller died while its request was held: nobody to answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_held(self, count: int, timeout: float = 60.0) -> list[bytes]:
        """Block until ``count`` requests are held (not yet released); their bodies, oldest first."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._held) >= count, timeout):
                raise TimeoutError(f"{len(self._held)} of {count} LLM request(s) held after {timeout}s")
            return [body for body, _ in self._held]

    def release(self, containing: str | None = None) -> int:
        """Let the held requests go on (those whose body contains ``containing``, else all); how many."""
        with self._cond:
            chosen = [h for h in self._held if containing is None or containing.encode() in h[0]]
            self._held = [h for h in self._held if h not in chosen]
        for _, event in chosen:
            event.set()
        return len(chosen)

    def close(self) -> None:
        with self._cond:
            self._closed = True
        self.release()
        self.server.shutdown()
