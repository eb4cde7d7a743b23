"""A caching reverse proxy that answers HTTP `Range` requests, in front of olah (see tests/olah_server.py).

olah serves the Hub API (revision, tree, paths-info, resolve) from local git repos, but answers
`GET .../resolve/...` chunked, without Content-Length or the Hub's headers (its HEAD has them), and ignores `Range`.
`datasets` streams Parquet through `HfFileSystem`, which reads byte ranges (the Parquet footer first) and expects the
Hub's `206 Partial Content`; from olah it gets the whole file and reports "Parquet magic bytes not found in footer".
This proxy forwards every request to olah unchanged, except that a `resolve` file is fetched from olah once (HEAD
for the headers, GET for the bytes), kept in memory, and answered as the Hub's file server does: olah's
`X-Repo-Commit` and `ETag`, `Content-Length`, `Accept-Ranges: bytes`, and `Range: bytes=a-b` → 206 with
`Content-Range` (416 when unsatisfiable). Redirects and errors are passed through as olah sent them.

For tests it also records the paths of the files it served (`served`) and can hold requests for chosen paths until
released (`hold` / `release`), so that a test can stop a run at a known point of its stream.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authenticate",
               "proxy-authorization", "content-length", "content-encoding", "accept-ranges", "content-range"}  # fmt: skip
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeProxy:
    """The proxy on 127.0.0.1 (a free port), forwarding to `upstream` (e.g. olah's endpoint). A context manager."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 80
        self._cache: dict[str, tuple[int, list[tuple[str, str]], bytes]] = {}
        self._lock = threading.Lock()
        self.served: list[str] = []  # resolve paths answered, in order (one entry per request)
        self.ranges: list[tuple[str, str]] = []  # (path, Range header) of the requests answered 206
        self._held: tuple[str, ...] = ()
        self._open = threading.Event()
        self._open.set()
        self.held_hits = threading.Event()  # set when a held request arrived
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                proxy._handle(self, head=False)

            def do_HEAD(self) -> None:
                proxy._handle(self, head=True)

            def do_POST(self) -> None:
                proxy._handle(self, head=False)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:  # a killed client resets its connections
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def upstream(self) -> str:
        return f"http://{self.upstream_host}:{self.upstream_port}"

    def start(self) -> RangeProxy:
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()

    def hold(self, *substrings: str) -> None:
        """Hold every resolve request whose path contains one of `substrings` until `release`."""
        self._held = substrings
        self.held_hits.clear()
        self._open.clear()

    def release(self) -> None:
        self._held = ()
        self._open.set()

    def __enter__(self) -> RangeProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- forwarding ---------------------------------------------------------------------------------------------------
    def _upstream(self, method: str, path: str, headers, body: bytes | None):
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=60)
        try:
            forward = {k: v for k, v in headers.items() if k.lower() not in {"host", "range", "accept-encoding",
                                                                               "connection", "content-length"}}
            forward["Accept-Encoding"] = "identity"
            conn.request(method, path, body=body, headers=forward)
            response = conn.getresponse()
            data = response.read()  # http.client decodes chunked transfer encoding
            return response.status, [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP_BY_HOP], data
        finally:
            conn.close()

    def _handle(self, request: BaseHTTPRequestHandler, head: bool) -> None:
        try:
            body = None
            if request.command == "POST":
                body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
            path = request.path
            if "/resolve/" not in path or request.command == "POST":
                status, headers, data = self._upstream(request.command, path, request.headers, body)
                self._reply(request, status, headers, data, head)
                return
            if self._held and any(s in path for s in self._held):
                self.held_hits.set()
                self._open.wait()
            with self._lock:
                cached = self._cache.get(path)
            if cached is None:
                # olah's HEAD carries the Hub's headers (X-Repo-Commit, ETag, length), its GET only the bytes.
                status, headers, _ = self._upstream("HEAD", path, request.headers, None)
                data = b""
                if status == 200:
                    data = self._upstream("GET", path, request.headers, None)[2]
                cached = (status, headers, data)
                if status == 200:
                    with self._lock:
                        self._cache[path] = cached
            status, headers, data = cached
            self.served.append(urlsplit(path).path)
            if status != 200:  # redirects and errors as olah answered them
                self._reply(request, status, headers, data, head)
                return
            etag = next((v for k, v in headers if k.lower() == "etag"), None) or f'"{hashlib.sha256(data).hexdigest()}"'
            headers = [(k, v) for k, v in headers if k.lower() not in {"etag", "x-linked-size"}]
            headers += [("ETag", etag), ("Accept-Ranges", "bytes")]
            if any(k.lower() == "x-linked-etag" for k, _ in headers):
                headers.append(("X-Linked-Size", str(len(data))))
            wanted = _RANGE.match(request.headers.get("Range", "").strip())
            if wanted is None:
                self._reply(request, 200, headers, data, head)
                return
            first, last = wanted.groups()
            size = len(data)
            if first == "":  # suffix range: the last N bytes
                start, end = max(0, size - int(last or 0)), size - 1
            else:
                start, end = int(first), min(size - 1, int(last) if last else size - 1)
            if start >= size or start > end:
                self._reply(request, 416, [("Content-Range", f"bytes */{size}")], b"", head)
                return
            headers.append(("Content-Range", f"bytes {start}-{end}/{size}"))
            self.ranges.append((urlsplit(path).path, request.headers["Range"]))
            self._reply(request, 206, headers, data[start : end + 1], head)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a killed run)

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, headers, data: bytes, head: bool) -> None:
        request.send_response(status)
        for key, value in headers:
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        if not head:
            request.wfile.write(data)
