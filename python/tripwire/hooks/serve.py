"""``tripwire serve``: hooks answered over HTTP on loopback, guards held in memory.

Claude Code's ``http`` hooks POST each event to ``/hooks/<harness>`` and read the answer from
the response body, as a ``command`` hook's stdout. Verdicts are the command hook's: the same
``tripwire.hooks.handle``, over sessions kept in memory (``MemoryStore``) instead of files. A
session nudged, stopped or ended has its record (not its guard) written to the state directory,
for ``tripwire sessions``.

Nothing gets in: it binds 127.0.0.1 unless told otherwise; a request without the secret
header (``X-Tripwire-Secret``, compared in constant time) gets 401 and touches nothing; a body
over ``MAX_BODY`` gets 413 unread; a body that is not a JSON object, or anything that goes
wrong inside tripwire, gets ``{}`` (the call goes ahead) and one line on stderr.
"""

from __future__ import annotations

import hmac
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from tripwire.hooks import HARNESSES, handle, harness
from tripwire.hooks._config import load_settings, state_dir
from tripwire.hooks._store import FileStore, MemoryStore

MAX_BODY: Final = 8 * 1024 * 1024
SECRET_HEADER: Final = "X-Tripwire-Secret"


def _log(text: str) -> None:
    try:
        sys.stderr.write(f"tripwire serve: {' '.join(text.split())[:500]}\n")
        sys.stderr.flush()
    except Exception:
        pass


class HookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: str, port: int, secret: str, store: Any) -> None:
        super().__init__((host, port), _Handler)
        self.secret = secret.encode()
        self.store = store
        self.protocols = {name: harness(name) for name in HARNESSES}

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HookServer
    # Headers and body in one write, Nagle off: written in two, the client's delayed ACK
    # holds the body back ~40 ms.
    wbufsize = 1 << 16
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the warnings

    def _send(self, status: int, body: dict[str, Any] | None = None) -> None:
        data = json.dumps(body if body is not None else {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.close_connection = True
        self._send(404, {"error": "POST hook events to /hooks/<harness>"})

    def do_POST(self) -> None:
        given = self.headers.get(SECRET_HEADER, "").encode("utf-8", "replace")
        if not hmac.compare_digest(given, self.server.secret):
            self.close_connection = True
            self._send(401, {"error": "missing or wrong secret"})
            return
        name = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        protocol = self.server.protocols.get(name)
        if protocol is None or not self.path.startswith("/hooks/"):
            self.close_connection = True
            self._send(404, {"error": f"no harness at {self.path[:100]}"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._send(413 if length > MAX_BODY else 411, {"error": "body too big or unsized"})
            return
        body = self.rfile.read(length)
        try:
            reply, warnings = handle(protocol, json.loads(body), self.server.store)
            if warnings:
                _log("; ".join(warnings))
        except Exception as exc:
            _log(f"{type(exc).__name__}: {exc}; the call is allowed")
            reply = None
        self._send(200, reply)


def secret() -> str:
    """The secret requests must carry: ``$TRIPWIRE_SECRET``, else the one ``tripwire
    install --serve`` made (made now if there is none)."""
    from_env = os.environ.get("TRIPWIRE_SECRET")
    if from_env:
        return from_env
    from tripwire.hooks.install import serve_secret

    value = serve_secret(create=True)
    assert value is not None
    return value


def make_server(host: str = "127.0.0.1", port: int = 0, key: str | None = None) -> HookServer:
    settings = load_settings()
    for warning in settings.warnings:
        _log(warning)
    summaries = FileStore(state_dir(), settings.ttl_hours, settings.make_guard)
    store = MemoryStore(settings.ttl_hours, settings.make_guard, summaries=summaries)
    return HookServer(host, port, key if key is not None else secret(), store)


def run(host: str, port: int) -> int:
    server = make_server(host, port)
    _log(f"listening on {server.url} (POST /hooks/<harness>; Ctrl-C ends)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def serve_in_thread(server: HookServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
