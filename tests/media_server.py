"""A local HTTP server for image-fetching tests: serves images and misbehaves on request.

It runs in a thread (``http.server``), so it is independent of any event loop, and it records
every request it receives, so tests can assert which hosts and paths ovserve contacted.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

# Bytes /endless would send if the client never stopped reading: far above any test's cap.
ENDLESS_LIMIT = 200 * 1024 * 1024


@dataclass
class Access:
    method: str
    path: str


@dataclass
class MediaServer:
    """``files`` maps a path (e.g. ``/img/red.png``) to (content type, body)."""

    host: str = "127.0.0.1"
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    accesses: list[Access] = field(default_factory=list)
    bytes_sent: dict[str, int] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _httpd: http.server.ThreadingHTTPServer | None = None

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def paths(self) -> list[str]:
        with self._lock:
            return [access.path for access in self.accesses]

    def clear(self) -> None:
        with self._lock:
            self.accesses.clear()
            self.bytes_sent.clear()

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self.accesses.append(Access(method, path))

    def add_sent(self, path: str, count: int) -> None:
        with self._lock:
            self.bytes_sent[path] = self.bytes_sent.get(path, 0) + count

    def start(self) -> MediaServer:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # the access list is the log

            def do_GET(self) -> None:
                server.record("GET", self.path)
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                route = getattr(self, "route_" + url.path.strip("/").split("/")[0], None)
                if url.path in server.files:
                    content_type, body = server.files[url.path]
                    self.reply(200, body, content_type)
                elif route is not None:
                    route(url.path, query)
                else:
                    self.reply(404, b"not found", "text/plain")

            def reply(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def route_redirect(self, path: str, query: dict[str, list[str]]) -> None:
                self.reply(302, b"", "text/plain", Location=query["to"][0])

            def route_chain(self, path: str, query: dict[str, list[str]]) -> None:
                # /chain/N redirects N times (relative Location), then serves /img/red.png.
                hops = int(path.rsplit("/", 1)[1])
                target = f"/chain/{hops - 1}" if hops > 0 else "/img/red.png"
                self.reply(302, b"", "text/plain", Location=target)

            def route_loop(self, path: str, query: dict[str, list[str]]) -> None:
                self.reply(302, b"", "text/plain", Location="/loop")

            def route_hang(self, path: str, query: dict[str, list[str]]) -> None:
                server.stopping.wait(60)  # accepts the request and never answers

            def route_drip(self, path: str, query: dict[str, list[str]]) -> None:
                # Headers at once, then a byte every 0.2 s: each read is fast, the whole is endless.
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                while not server.stopping.wait(0.2):
                    try:
                        self.wfile.write(b"\x89")
                        self.wfile.flush()
                    except OSError:
                        return
                    server.add_sent(path, 1)

            def route_big(self, path: str, query: dict[str, list[str]]) -> None:
                # Announces 50 MB and then sends nothing: only a client that trusts
                # Content-Length refuses at once; one that reads would hit its read timeout.
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(50 * 1024 * 1024))
                self.end_headers()
                self.wfile.flush()
                server.stopping.wait(60)

            def route_endless(self, path: str, query: dict[str, list[str]]) -> None:
                # No Content-Length: only counting while reading can stop this body.
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b"\x00" * 65536
                sent = 0
                while sent < ENDLESS_LIMIT and not server.stopping.is_set():
                    try:
                        self.wfile.write(chunk)
                    except OSError:
                        break
                    sent += len(chunk)
                server.add_sent(path, sent)
                self.close_connection = True

        self._httpd = http.server.ThreadingHTTPServer((self.host, 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name=f"media-server-{self.host}", daemon=True).start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


class NeverAccepts:
    """A listening socket whose accept queue is full: connection attempts hang in SYN_SENT."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.listener = socket.socket()
        self.listener.bind((host, 0))
        self.listener.listen(0)
        self.port = int(self.listener.getsockname()[1])
        self.fillers: list[socket.socket] = []
        # Fill the backlog; later SYNs are dropped by the kernel instead of being answered.
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((host, self.port))
            self.fillers.append(filler)
        time.sleep(0.1)

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.listener.close()
