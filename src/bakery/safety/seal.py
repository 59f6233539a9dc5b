"""Seals on what bakery keeps in its cache as proof: an HMAC-SHA256 under a key that lives
outside the cache, so that a record is believed only where this machine's bakery wrote it.

The cache is data (a CI cache restored from another branch, a folder on a shared runner):
a verify result, a pristine tree's file list or an environment's marker found there says
nothing by itself, since anyone who can write the cache can write one with the right name.
Each such record carries ``seal(kind, payload)``; a record whose seal does not match is
ignored (the work is done again), never believed.

The key: 32 random bytes (hex) in ``seal.key`` of bakery's folder in the user's
configuration folder (platformdirs' ``user_config_dir``; ``BAKERY_CONFIG_DIR`` overrides
it, as the tests and a CI job that keeps the key as a secret do). It is made on first use
with mode 0600 in a 0700 folder, written beside its place and linked into it (two
processes never see half a key). A key file that is a link, not a regular file, not the
user's own, readable or writable by others, or of the wrong size is not used: nothing is
sealed or believed, and :class:`SealUnavailable` says why (callers then trust no record).

Hand-written over :mod:`hmac` (the standard library): a few lines, and no library keeps a
per-user MAC key with these checks.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path

from bakery.errors import BakeryError

ENV = "BAKERY_CONFIG_DIR"
KEY_FILE = "seal.key"
_KEY_BYTES = 32

_keys: dict[str, bytes] = {}


class SealUnavailable(BakeryError):
    """No key to seal or check with (a key file that cannot be trusted, a folder that
    cannot be written)."""


def config_dir() -> Path:
    """bakery's folder in the user's configuration folder (``BAKERY_CONFIG_DIR`` wins)."""
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    import platformdirs  # only here: it is slow to import

    return Path(platformdirs.user_config_dir("bakery", appauthor=False))


def key_path() -> Path:
    return config_dir() / KEY_FILE


def _read(path: Path) -> bytes:
    """The key at path: a regular file of the user's own, 0600 or stricter, 64 hex digits."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SealUnavailable(f"the seal key {path} is not a regular file")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise SealUnavailable(f"the seal key {path} belongs to another user")
        if st.st_mode & 0o077:
            raise SealUnavailable(
                f"the seal key {path} can be read or written by others (mode "
                f"{stat.S_IMODE(st.st_mode):o}); delete it and bakery makes a new one"
            )
        data = os.read(fd, 2 * _KEY_BYTES + 2).strip()
    finally:
        os.close(fd)
    try:
        raw = bytes.fromhex(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raw = b""
    if len(raw) != _KEY_BYTES:
        raise SealUnavailable(f"the seal key {path} is not {_KEY_BYTES} bytes in hex")
    return raw


def _make(path: Path) -> None:
    """A new key at path, unless another process made one first (then that one stands)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, (secrets.token_hex(_KEY_BYTES) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails where a key (or anything) is there already
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def key() -> bytes:
    """This user's key, made on first use (SealUnavailable where it cannot be trusted)."""
    path = key_path()
    cached = _keys.get(str(path))
    if cached is not None:
        return cached
    try:
        try:
            raw = _read(path)
        except FileNotFoundError:
            _make(path)
            raw = _read(path)
    except OSError as e:
        raise SealUnavailable(f"the seal key {path}: {e.strerror or e}") from None
    _keys[str(path)] = raw
    return raw


def seal(kind: str, payload: bytes) -> str:
    """The seal of payload as a record of kind (a record of one kind never passes as
    another's)."""
    return hmac.new(key(), kind.encode() + b"\0" + payload, hashlib.sha256).hexdigest()


def canonical(data: object) -> bytes:
    """The bytes a JSON record is sealed over: keys sorted, no spaces."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def seal_json(kind: str, data: object) -> str:
    return seal(kind, canonical(data))


def valid(kind: str, payload: bytes, mac: object) -> bool:
    """Whether mac is payload's seal (False, never an error, where there is no key)."""
    if not isinstance(mac, str):
        return False
    try:
        expected = seal(kind, payload)
    except SealUnavailable:
        return False
    return hmac.compare_digest(expected, mac)


def valid_json(kind: str, data: object, mac: object) -> bool:
    return valid(kind, canonical(data), mac)
