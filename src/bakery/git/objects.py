"""Git's on-disk formats, written directly for one job: turning an extracted source tree into
a repository in the same pass that writes its files, so git never reads the tree again.

``git add`` of a 7,000-file vLLM tree reads, hashes (SHA-1DC, the slow collision-detecting
SHA-1) and deflates every file; ``git fast-import`` still hashes each object three times.
Here every blob is hashed once with hashlib while its bytes are in memory, stored in one
pack (deflate's "stored" blocks: no compression, the cache trades disk for time), with its
``.idx``, the trees, one commit, and a ``.git/index`` carrying each file's stat data (so
``git status`` trusts the files without reading them). Formats, as git documents them:
gitformat-pack(5) (pack v2, idx v2) and gitformat-index(5) (index v2).

Tests check the result with git itself: ``git fsck --strict``, the same commit id as
``git add -A`` + ``git commit``, and a clean ``git status`` that reads no file.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path

OBJ_COMMIT, OBJ_TREE, OBJ_BLOB = 1, 2, 3
_TYPE_NAMES = {OBJ_COMMIT: b"commit", OBJ_TREE: b"tree", OBJ_BLOB: b"blob"}

MODE_FILE, MODE_EXEC, MODE_LINK, MODE_TREE = 0o100644, 0o100755, 0o120000, 0o40000

_STORED_MAX = 0xFFFF  # the largest stored deflate block


def object_id(kind: int, data: bytes | memoryview) -> bytes:
    h = hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)))
    h.update(data)
    return h.digest()


def _stored_zlib(data: memoryview) -> list[bytes | memoryview]:
    """data as a zlib stream of stored (uncompressed) deflate blocks (RFC 1950/1951)."""
    pieces: list[bytes | memoryview] = [b"\x78\x01"]
    n = len(data)
    start = 0
    while True:
        block = data[start : start + _STORED_MAX]
        start += len(block)
        final = start >= n
        pieces.append(struct.pack("<BHH", 1 if final else 0, len(block), len(block) ^ 0xFFFF))
        pieces.append(block)
        if final:
            break
    pieces.append(struct.pack(">I", zlib.adler32(data)))
    return pieces


def _object_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


class Pack:
    """Objects collected in memory, then written as one pack and its index. The pieces
    refer to the callers' buffers: nothing is copied until the pack is written."""

    def __init__(self) -> None:
        self._pieces: list[bytes | memoryview] = []
        self._entries: dict[bytes, tuple[int, int]] = {}  # id -> (offset, crc32)
        self._offset = 12
        self._lock = threading.Lock()  # add() is called from several threads

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._entries

    def add(self, kind: int, data: bytes | memoryview, oid: bytes | None = None) -> bytes:
        """Add an object (once: the same content is stored once); returns its id. The
        hashing runs unlocked (hashlib and zlib release the GIL on large buffers)."""
        view = memoryview(data).cast("B")
        oid = oid or object_id(kind, view)
        if oid in self._entries:
            return oid
        pieces = [_object_header(kind, len(view)), *_stored_zlib(view)]
        crc = 0
        size = 0
        for p in pieces:
            crc = zlib.crc32(p, crc)
            size += len(p)
        with self._lock:
            if oid not in self._entries:
                self._entries[oid] = (self._offset, crc)
                self._offset += size
                self._pieces += pieces
        return oid

    def write(self, objects_dir: Path) -> str:
        """Write pack-<id>.pack and .idx into objects_dir/pack; returns the pack's id."""
        pack_dir = objects_dir / "pack"
        pack_dir.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha1()
        tmp_pack = pack_dir / f"tmp_pack_bakery_{os.getpid()}"
        with tmp_pack.open("wb") as fh:
            header = b"PACK" + struct.pack(">II", 2, len(self._entries))
            h.update(header)
            fh.write(header)
            for p in self._pieces:
                h.update(p)
                fh.write(p)
            checksum = h.digest()
            fh.write(checksum)
        name = f"pack-{checksum.hex()}"
        tmp_idx = pack_dir / f"tmp_idx_bakery_{os.getpid()}"
        tmp_idx.write_bytes(self._index(checksum))
        os.replace(tmp_pack, pack_dir / f"{name}.pack")
        os.replace(tmp_idx, pack_dir / f"{name}.idx")
        self._pieces = []
        return checksum.hex()

    def _index(self, pack_checksum: bytes) -> bytes:
        ids = sorted(self._entries)
        fanout = [0] * 256
        for oid in ids:
            fanout[oid[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        small: list[int] = []
        large: list[int] = []
        for oid in ids:
            off = self._entries[oid][0]
            if off < 0x80000000:
                small.append(off)
            else:
                small.append(0x80000000 | len(large))
                large.append(off)
        body = b"".join(
            [
                b"\377tOc",
                struct.pack(">I", 2),
                struct.pack(">256I", *fanout),
                *ids,
                struct.pack(f">{len(ids)}I", *(self._entries[o][1] for o in ids)),
                struct.pack(f">{len(ids)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                pack_checksum,
            ]
        )
        return body + hashlib.sha1(body).digest()


def _tree_key(item: tuple[bytes, tuple[int, bytes]]) -> bytes:
    name, (mode, _) = item
    return name + b"/" if mode == MODE_TREE else name  # git sorts a folder as "name/"


def add_trees(pack: Pack, files: Iterable[tuple[bytes, int, bytes]]) -> bytes:
    """The tree objects for (path, mode, blob id) entries; returns the root tree's id."""
    root: dict[bytes, object] = {}
    for path, mode, oid in files:
        *dirs, name = path.split(b"/")
        node = root
        for d in dirs:
            node = node.setdefault(d, {})  # type: ignore[assignment]
        node[name] = (mode, oid)

    def write(node: dict[bytes, object]) -> bytes:
        items: dict[bytes, tuple[int, bytes]] = {}
        for name, child in node.items():
            items[name] = (MODE_TREE, write(child)) if isinstance(child, dict) else child  # type: ignore[assignment]
        body = b"".join(
            b"%o %s\0%s" % (mode, name, oid)
            for name, (mode, oid) in sorted(items.items(), key=_tree_key)
        )
        return pack.add(OBJ_TREE, body)

    return write(root)


def add_commit(
    pack: Pack,
    tree: bytes,
    message: str,
    author: bytes,
    committer: bytes,
    parents: Iterable[bytes] = (),
) -> bytes:
    lines = [b"tree %s\n" % tree.hex().encode()]
    lines += [b"parent %s\n" % p.hex().encode() for p in parents]
    lines += [b"author %s\n" % author, b"committer %s\n" % committer, b"\n", message.encode()]
    return pack.add(OBJ_COMMIT, b"".join(lines))
