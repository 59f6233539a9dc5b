"""Class 6: secrets at rest.

The cached wheel listing (``wheels/vllm-X.index.json``) is kept for later runs; the
index's file URLs may hold a password or token (userinfo) or a signed URL's signature
(``X-Amz-Signature``, ``sig``, ``token``). None of it is stored: the listing keeps the
URLs redacted, and a wheel not yet downloaded is listed again from the index for its
real URL. No secret appears anywhere in the cache.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from bakery.sources import resolve, wheels
from bakery.sources.bounded import IndexFile
from bakery.sources.cache import Cache

NAME = "vllm-1.0.0-cp38-abi3-manylinux_2_28_x86_64.whl"
SECRETS = ("hunter2hunter2", "ghp_TOKEN1234", "SIGNATURE0000abc", "SeCrEtToKeN99")
URLS = [
    f"https://user:{SECRETS[0]}@files.example/{NAME}",
    f"https://{SECRETS[1]}@files.example/{NAME}",
    f"https://files.example/{NAME}?X-Amz-Signature={SECRETS[2]}&X-Amz-Expires=60",
    f"https://files.example/{NAME}?token={SECRETS[3]}",
]


def _cache_text(root: Path) -> str:
    return "".join(
        p.read_text(errors="replace") for p in root.rglob("*") if p.is_file() and not p.is_symlink()
    )


@pytest.mark.parametrize("url", URLS)
def test_listing_keeps_no_secret(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sha = hashlib.sha256(b"w").hexdigest()
    monkeypatch.setattr(resolve, "index_files", lambda: [IndexFile(NAME, url, sha, 1)])
    cache = Cache()
    (listed,) = wheels.release_wheels("1.0.0", cache)
    assert listed.url == url  # this run downloads with the real URL
    text = _cache_text(cache.root)
    assert NAME in text  # the listing was kept...
    assert not any(s in text for s in SECRETS)  # ...without the secret


def test_a_wheel_listed_from_the_cache_is_fetched_with_the_index_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sha = hashlib.sha256(b"w").hexdigest()
    url = URLS[2]
    monkeypatch.setattr(resolve, "index_files", lambda: [IndexFile(NAME, url, sha, 1)])
    cache = Cache()
    wheels.release_wheels("1.0.0", cache)
    (kept,) = wheels.release_wheels("1.0.0", cache)  # from the cache now
    assert SECRETS[2] not in kept.url
    fetched: list[str] = []

    def download(f: IndexFile, dest: Path, progress: object) -> None:
        fetched.append(f.url)
        dest.write_bytes(b"w")

    monkeypatch.setattr(resolve, "_download", download)
    path = wheels.fetch(kept, cache)
    assert fetched == [url] and path.read_bytes() == b"w"
    assert SECRETS[2] not in _cache_text(cache.root)


def test_error_lines_about_a_listed_url_hide_its_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakery.errors import SourceError

    bad = f"https://user:{SECRETS[0]}@files.example/{NAME}\nX-Injected: 1"
    sha = hashlib.sha256(b"w").hexdigest()
    monkeypatch.setattr(resolve, "index_files", lambda: [IndexFile(NAME, bad, sha, 1)])
    with pytest.raises(SourceError) as info:
        wheels.release_wheels("1.0.0", Cache())
    assert SECRETS[0] not in info.value.message and "\n" not in info.value.message
