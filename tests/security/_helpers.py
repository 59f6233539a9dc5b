"""Shared pieces of the security tests: a local package index and git server on
127.0.0.1 (nothing reaches the network), traps that record whether they ran, and the
contract's checks of a refusal (one line on stderr, exit 2, no traceback)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import struct
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from typer.testing import Result

X_PY = "".join(f"{c}\n" for c in "abcdefghij")
DIFF = "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n d\n"


def trap(marker: Path) -> str:
    """A shell command that leaves marker behind if anything runs it."""
    return f"touch {marker}; false"


def hook(git_dir: Path, name: str, marker: Path) -> None:
    hooks = git_dir / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
    (hooks / name).chmod(0o755)


def refused(r: Result, *words: str) -> str:
    """The contract's refusal: exit 2, one error line naming words, no traceback."""
    assert r.exit_code == 2, r.output
    err = r.stderr
    assert "Traceback" not in r.output, r.output
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, err  # progress lines ("Applying ...") may come before it
    for w in words:
        assert w in errors[0], (w, err)
    return errors[0]


def series(root: Path, diff: str = DIFF, toml: str = 'strip = 1\nroot = ""\n') -> Path:
    s = root / "series"
    (s / "diffs").mkdir(parents=True, exist_ok=True)
    (s / "series.toml").write_text(toml)
    (s / "diffs" / "01-x.diff").write_text(diff)
    return s


def sdist(version: str, extra: list[tuple[tarfile.TarInfo, bytes | None]] | None = None) -> bytes:
    top = f"vllm-{version}"
    members = {
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode(),
        f"{top}/vllm/__init__.py": b"",
        f"{top}/vllm/x.py": X_PY.encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1_000_000_000
            tar.addfile(info, io.BytesIO(data))
        for info, content in extra or []:
            tar.addfile(info, io.BytesIO(content) if content is not None else None)
    return buf.getvalue()


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


@contextlib.contextmanager
def serve(root: Path) -> Iterator[Server]:
    root.mkdir(parents=True, exist_ok=True)
    srv = Server(root)

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            srv.seen.append(self.requestline + " " + str(self.headers.get("Authorization")))

        def guess_type(self, path: str | os.PathLike[str]) -> str:
            # the pages index() writes are PEP 691 JSON, served as such
            if "/simple/" in str(path).replace(os.sep, "/"):
                return "application/vnd.pypi.simple.v1+json"
            return super().guess_type(path)

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
    srv.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        server.shutdown()
        server.server_close()


def files_under(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            yield Path(dirpath, n)


def snapshot(root: Path) -> dict[str, str]:
    """Every path under root with what it is (a file's sha256, a link's target, a
    folder): two snapshots are equal only when nothing under root changed."""
    out: dict[str, str] = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            p = Path(dirpath, n)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "link " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "special"
    return out


def raw_zip(members: list[tuple[str, bytes, int, int, int]]) -> bytes:
    """A zip by hand: (name, stored bytes, method, crc, stated size) per member, so that
    a member's sizes may lie as a hostile archive's do."""
    body, central = b"", b""
    for name, data, method, crc, usize in members:
        raw = name.encode()
        local = struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21, crc, len(data), usize, len(raw), 0
        )
        central += struct.pack(
            "<IBBBBHHHHIIIHHHHHII",
            0x02014B50, 20, 3, 20, 0, 0, method, 0, 0x21, crc, len(data), usize,
            len(raw), 0, 0, 0, 0, 0o100644 << 16, len(body),
        ) + raw  # fmt: skip
        body += local + raw + data
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                      len(central), len(body), 0)  # fmt: skip
    return body + central + end
