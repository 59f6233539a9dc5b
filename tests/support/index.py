"""The one fake package index: a tiny HTTP server on 127.0.0.1 in a thread, so that
nothing reaches the network.

``serving`` is the server (a handler class in, a port out; HTTPS when given a certificate).
What it answers is one of three pages:

- ``Index`` (``serve_index``, the ``index`` fixture in conftest.py): a PEP 691 JSON page
  per project (``files: [{filename, url, hashes: {sha256}, size}]``) and the files it lists.
  It counts downloads, and can lie about a hash, cut a file short or send it slowly.
- ``LocalIndex`` (``serve(LocalIndex(...))``): the simple API as pip and uv read it, in
  either format (JSON, PEP 691; HTML, PEP 503), with relative file URLs, behind basic auth,
  redirecting its files to another host name, over HTTPS.
- ``Server`` (``serve(folder)``): the files of a folder as they are (a PEP 691 page that
  ``Server.index`` writes, sdists, a dumb-HTTP git repository), recording every request.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import overload


@contextlib.contextmanager
def serving(
    handler: Callable[..., BaseHTTPRequestHandler], tls: tuple[Path, Path] | None = None
) -> Iterator[int]:
    """handler's answers on 127.0.0.1 (HTTPS with the (certificate, key) files ``tls``)
    from a thread, until the block ends; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: bytes, ctype: str, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


# --- Index: the index bakery downloads releases from ------------------------------------------


@dataclass
class Index:
    """A package index on 127.0.0.1: ``add`` a file, read ``downloads``."""

    files: dict[str, bytes] = field(default_factory=dict)
    #: sha256 the index states, where it should lie about a file.
    stated_sha: dict[str, str] = field(default_factory=dict)
    #: bytes actually sent, where the server should cut a file short.
    cut: dict[str, int] = field(default_factory=dict)
    #: seconds a file's body is spread over (ten chunks), where a test must see the
    #: download under way (a killed download's .part file) rather than race it.
    trickle: dict[str, float] = field(default_factory=dict)
    downloads: Counter[str] = field(default_factory=Counter)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, filename: str, data: bytes) -> None:
        self.files[filename] = data

    def page(self) -> bytes:
        base = self.url.rsplit("/simple", 1)[0]
        return json.dumps(
            {
                "meta": {"api-version": "1.0"},
                "name": "vllm",
                "files": [
                    {
                        "filename": name,
                        "url": f"{base}/files/{name}",
                        "hashes": {
                            "sha256": self.stated_sha.get(name, hashlib.sha256(data).hexdigest())
                        },
                        "size": len(data),
                    }
                    for name, data in self.files.items()
                ],
            }
        ).encode()


@contextlib.contextmanager
def serve_index() -> Iterator[Index]:
    """An index on 127.0.0.1 in a thread; its URL (for BAKERY_INDEX_URL) is ``url``."""
    idx = Index()

    class Handler(_Quiet):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            name = self.path[7:]
            if self.path == "/simple/vllm/":
                return self._send(200, idx.page(), "application/vnd.pypi.simple.v1+json")
            if not (self.path.startswith("/files/") and name in idx.files):
                return self._send(404, b"not found", "text/plain")
            with idx.lock:
                idx.downloads[name] += 1
            body = idx.files[name]
            if name in idx.trickle:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                step = -(-len(body) // 10)
                for at in range(0, len(body), step):
                    self.wfile.write(body[at : at + step])
                    self.wfile.flush()
                    time.sleep(idx.trickle[name] / 10)
                return None
            if name not in idx.cut:
                return self._send(200, body, "application/octet-stream")
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: idx.cut[name]])
            self.close_connection = True

    with serving(Handler) as port:
        idx.url = f"http://127.0.0.1:{port}/simple"
        yield idx


# --- LocalIndex: the simple API as pip reads it -------------------------------------------------


@dataclass
class LocalIndex:
    """``fmt``: "json" | "html" | "text" (a page that is neither). ``auth``: the
    user:password every request must carry. ``redirect``: file URLs answer with a redirect
    to the same server under another host name (localhost)."""

    files: dict[str, bytes] = field(default_factory=dict)
    fmt: str = "json"
    auth: str | None = None
    redirect: bool = False
    yanked: set[str] = field(default_factory=set)
    #: (certificate, key) files: serve HTTPS
    tls: tuple[Path, Path] | None = None
    #: (host header, path, Authorization header or None) of every request
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/simple"

    def page(self) -> tuple[bytes, str]:
        # relative URLs, as both PEPs allow
        rows = [
            (n, f"../../files/{n}", hashlib.sha256(d).hexdigest()) for n, d in self.files.items()
        ]
        if self.fmt == "json":
            data = {
                "meta": {"api-version": "1.0"},
                "name": "vllm",
                "files": [
                    {"filename": n, "url": u, "hashes": {"sha256": h}, "yanked": n in self.yanked}
                    for n, u, h in rows
                ],
            }
            return json.dumps(data).encode(), "application/vnd.pypi.simple.v1+json"
        links = "".join(
            f'<a href="{u}#sha256={h}"{" data-yanked" if n in self.yanked else ""}>{n}</a><br>\n'
            for n, u, h in rows
        )
        ctype = "text/plain" if self.fmt == "text" else "text/html; charset=utf-8"
        return f"<html><body>\n{links}</body></html>".encode(), ctype


def _local_handler(idx: LocalIndex) -> type[BaseHTTPRequestHandler]:
    class Handler(_Quiet):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            host = self.headers.get("Host", "")
            given = self.headers.get("Authorization")
            idx.seen.append((host, self.path, given))
            want = f"Basic {base64.b64encode(idx.auth.encode()).decode()}" if idx.auth else None
            name = self.path.rsplit("/", 1)[-1]
            to_other_host = idx.redirect and host.startswith("127.0.0.1")
            if self.path.startswith("/files/") and name in idx.files and to_other_host:
                location = f"http://localhost:{idx.port}{self.path}"
                return self._send(302, b"", "text/plain", Location=location)
            if want is not None and given != want and not host.startswith("localhost"):
                return self._send(401, b"no", "text/plain", **{"WWW-Authenticate": "Basic"})
            if self.path == "/simple/vllm/":
                return self._send(200, *idx.page())
            if self.path.startswith("/files/") and name in idx.files:
                return self._send(200, idx.files[name], "application/octet-stream")
            return self._send(404, b"not found", "text/plain")

    return Handler


# --- Server: a folder's files as they are ------------------------------------------------------


@dataclass
class Server:
    """Files served on 127.0.0.1 from ``root``; ``url`` is its address."""

    root: Path
    url: str = ""
    seen: list[str] = field(default_factory=list)

    def index(self, files: list[dict[str, object]] | object, project: str = "vllm") -> None:
        """A PEP 691 page at /simple/<project>/index.html (served for /simple/<project>/,
        with the PEP 691 JSON content type)."""
        page = self.root / "simple" / project
        page.mkdir(parents=True, exist_ok=True)
        body = (
            files
            if not isinstance(files, list)
            else {"meta": {"api-version": "1.0"}, "files": files}
        )
        (page / "index.html").write_text(json.dumps(body))

    def add(self, name: str, data: bytes, **entry: object) -> dict[str, object]:
        (self.root / "files").mkdir(parents=True, exist_ok=True)
        (self.root / "files" / name).write_bytes(data)
        out: dict[str, object] = {
            "filename": name,
            "url": f"{self.url}/files/{name}",
            "hashes": {"sha256": hashlib.sha256(data).hexdigest()},
            "size": len(data),
        }
        out.update(entry)
        return out


def _files_handler(srv: Server) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            srv.seen.append(self.requestline + " " + str(self.headers.get("Authorization")))

        def guess_type(self, path: str | os.PathLike[str]) -> str:
            # the pages index() writes are PEP 691 JSON, served as such
            if "/simple/" in str(path).replace(os.sep, "/"):
                return "application/vnd.pypi.simple.v1+json"
            return super().guess_type(path)

    return functools.partial(Handler, directory=str(srv.root))


@overload
def serve(site: LocalIndex) -> contextlib.AbstractContextManager[LocalIndex]: ...
@overload
def serve(site: Path) -> contextlib.AbstractContextManager[Server]: ...
def serve(site: LocalIndex | Path) -> contextlib.AbstractContextManager[LocalIndex | Server]:
    """Serve a LocalIndex (its ``url`` set), or the files of a folder (a ``Server``)."""
    return _serve(site)


@contextlib.contextmanager
def _serve(site: LocalIndex | Path) -> Iterator[LocalIndex | Server]:
    if isinstance(site, LocalIndex):
        with serving(_local_handler(site), site.tls) as site.port:
            yield site
        return
    site.mkdir(parents=True, exist_ok=True)
    srv = Server(site)
    with serving(_files_handler(srv)) as port:
        srv.url = f"http://127.0.0.1:{port}"
        yield srv
