"""Synthetic vLLM-like releases for the scale benchmark, served from a local package index.

A synthetic release ``0.0.N`` is an sdist of N files (``vllm-0.0.N/vllm/dXXX/fYYY.py``,
a few KiB each, like the vLLM tree). It is served by a throwaway HTTP index on 127.0.0.1,
so ``bakery apply --vllm 0.0.N`` takes the same path as a real release: download once
into the benchmark's cache, then bake from the cached tree.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FILES_PER_DIR = 100
#: The files the synthetic series patch: they exist in every tree of 1,000 files or more.
PATCHED = [f"d000/f{i:03d}.py" for i in range(20)]


def _content(d: int, f: int) -> bytes:
    """A deterministic text file of 1-8 KiB (the vLLM tree averages about 16 KiB, but it is
    the number of files, not their bytes, that the copy pays for)."""
    lines = [f"# synthetic file d{d:03d}/f{f:03d}.py", "", "def f():", "    return 0", ""]
    seed = (d * 7919 + f * 104729) % 97
    for i in range(16 + seed * 2):
        lines.append(f"VALUE_{i} = {(i * 31 + seed) % 1000}  # line {i} of d{d:03d}/f{f:03d}")
    return ("\n".join(lines) + "\n").encode()


def version_for(nfiles: int) -> str:
    return f"0.0.{nfiles}"


def make_sdist(nfiles: int, dest: Path) -> Path:
    """An sdist of nfiles files (PKG-INFO included) at dest/vllm-0.0.N.tar.gz."""
    version = version_for(nfiles)
    top = f"vllm-{version}"
    path = dest / f"{top}.tar.gz"
    if path.exists():
        return path
    dest.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:

        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode, info.mtime = len(data), mode, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))

        add("PKG-INFO", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode())
        for n in range(nfiles - 1):
            d, f = divmod(n, FILES_PER_DIR)
            add(f"vllm/d{d:03d}/f{f:03d}.py", _content(d, f))
    tmp.rename(path)
    return path


def make_series(ndiffs: int, dest: Path) -> Path:
    """A series of ndiffs diffs, each changing one of the PATCHED files."""
    folder = dest / f"synth{ndiffs}"
    diffs = folder / "diffs"
    if diffs.is_dir():
        return folder
    diffs.mkdir(parents=True)
    (folder / "series.toml").write_text('root = "vllm"\nstrip = 1\n')
    for i in range(ndiffs):
        rel = PATCHED[i]
        old = _content(0, i).decode().splitlines(keepends=True)
        new = [*old[:3], f"    # patched by diff {i + 1}\n", *old[3:]]
        body = (
            "".join(f" {ln}" for ln in old[0:3])
            + f"+{new[3]}"
            + "".join(f" {ln}" for ln in old[3:6])
        )
        (diffs / f"{i + 1:02d}-f{i:03d}.diff").write_text(
            f"--- a/{rel}\n+++ b/{rel}\n@@ -1,6 +1,7 @@\n{body}"
        )
    return folder


class _Index(http.server.BaseHTTPRequestHandler):
    files: dict[str, Path] = {}
    base = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.rstrip("/") == "/simple/vllm":
            entries = [
                {
                    "filename": name,
                    "url": f"{self.base}/files/{name}",
                    "hashes": {"sha256": hashlib.sha256(p.read_bytes()).hexdigest()},
                    "size": p.stat().st_size,
                }
                for name, p in sorted(self.files.items())
            ]
            self._send(
                json.dumps({"name": "vllm", "files": entries}).encode(),
                "application/vnd.pypi.simple.v1+json",
            )
        elif self.path.startswith("/files/") and self.path[7:] in self.files:
            self._send(self.files[self.path[7:]].read_bytes(), "application/octet-stream")
        else:
            self.send_error(404)

    def _send(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def local_index(sdists: list[Path]) -> Iterator[str]:
    """Serve the sdists as a PEP 691 simple index; yields its URL (BAKERY_INDEX_URL)."""
    handler: type[_Index] = type("Index", (_Index,), {"files": {p.name: p for p in sdists}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    handler.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{handler.base}/simple"
    finally:
        server.shutdown()
        server.server_close()
