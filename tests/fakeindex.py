"""A package index on 127.0.0.1 for tests, and the synthetic sdists it serves.

A tiny HTTP server in a thread plays the package index (a PEP 691 JSON page per project,
``files: [{filename, url, hashes: {sha256}, size}]``) and serves sdists built here with
tarfile, so nothing reaches the network. It counts downloads, and can lie about a hash or
cut a file short. The ``index`` fixture (conftest.py) serves one and points bakery at it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

X_PY = "".join(f"{c}\n" for c in "abcdefghij")
DIFF = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n d\n"


# --- the index ------------------------------------------------------------------------------


@dataclass
class Index:
    """A package index on 127.0.0.1: ``add`` a file, read ``downloads``."""

    files: dict[str, bytes] = field(default_factory=dict)
    #: sha256 the index states, where it should lie about a file.
    stated_sha: dict[str, str] = field(default_factory=dict)
    #: bytes actually sent, where the server should cut a file short.
    cut: dict[str, int] = field(default_factory=dict)
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

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/simple/vllm/":
                body = idx.page()
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            elif self.path.startswith("/files/") and self.path[7:] in idx.files:
                name = self.path[7:]
                with idx.lock:
                    idx.downloads[name] += 1
                body = idx.files[name]
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                if name in idx.cut:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: idx.cut[name]])
                    self.close_connection = True
                    return
            else:
                body = b"not found"
                self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    idx.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield idx
    finally:
        server.shutdown()
        server.server_close()


def sdist(
    version: str,
    files: int = 40,
    extra: list[tarfile.TarInfo] | None = None,
    extra_data: dict[str, bytes] | None = None,
) -> bytes:
    """vllm-<version>.tar.gz with PKG-INFO, vllm/x.py and some filler modules."""
    top = f"vllm-{version}"
    members = {
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{top}/vllm/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{top}/vllm/x.py": X_PY.encode(),
    }
    for i in range(files):
        members[f"{top}/vllm/pkg/m{i:03d}.py"] = f"VALUE = {i}\n".encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_000_000_000
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            payload = (extra_data or {}).get(info.name)
            tar.addfile(info, io.BytesIO(payload) if payload is not None else None)
    return buf.getvalue()


def index_series(root: Path) -> Path:
    """A series of one diff (vllm/x.py: b -> B) for the releases ``sdist`` makes."""
    series = root / "series"
    (series / "diffs").mkdir(parents=True, exist_ok=True)
    (series / "series.toml").write_text('strip = 1\nroot = ""\n')
    (series / "diffs" / "01-x.diff").write_text(DIFF)
    return series
