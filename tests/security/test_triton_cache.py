"""Round 4, High 4: Triton's compile cache is not in bakery's cache.

Triton ``dlopen``s the launcher ``.so`` it finds in its compile cache. bakery's cache may
be restored from another job or written by another user, so verify leaves Triton's cache
where Triton keeps it (``~/.triton/cache``, per user, or the user's own
``TRITON_CACHE_DIR``): the tests see no ``TRITON_CACHE_DIR`` that bakery chose, and a
planted ``CACHE/triton`` (a folder of ``.so`` files, or a link out of the cache) is never
read or written. Each case runs a real verify whose test writes what it sees.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.sources.cache import Cache
from tests.support.trees import Tiny, snapshot, write_files

Cli = Callable[..., Result]


@pytest.fixture
def seen(tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny series, baked to out, with a test that writes the TRITON_CACHE_DIR the
    test process sees."""
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    where = tmp_path / "seen.txt"
    test = (
        "import os\n\n\ndef test_env():\n"
        f"    open({str(where)!r}, 'w').write(os.environ.get('TRITON_CACHE_DIR', '<unset>'))\n"
    )
    write_files(tiny.series / "tests", {"test_env.py": test})
    return where


def _verify(cli: Cli, tiny: Tiny, tmp_path: Path, *extra: str) -> Result:
    out = tmp_path / "out"
    if not out.exists():
        assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    r = cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1", *extra)
    assert "Traceback" not in r.output, r.output
    return r


def test_verify_leaves_tritons_cache_at_tritons_default(
    cli: Cli, tiny: Tiny, tmp_path: Path, seen: Path
) -> None:
    _verify(cli, tiny, tmp_path, "--no-reuse")
    assert seen.read_text() == "<unset>"  # Triton's own default: ~/.triton/cache
    assert not (Cache().root / "triton").exists()


def test_the_users_triton_cache_dir_is_kept(
    cli: Cli, tiny: Tiny, tmp_path: Path, seen: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "my-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(mine))
    _verify(cli, tiny, tmp_path, "--no-reuse")
    assert seen.read_text() == str(mine)


def test_a_planted_triton_folder_in_the_cache_is_never_used(
    cli: Cli, tiny: Tiny, tmp_path: Path, seen: Path
) -> None:
    """A ``.so`` of the launcher's layout planted in CACHE/triton, and CACHE/triton as a
    link out of the cache: neither reaches the tests, and what the link names is left
    as it was."""
    cache = Cache().path(".")
    write_files(cache / "triton" / "3.5.0" / "ABC", {"cuda_utils.so": b"\x7fELF payload"})
    _verify(cli, tiny, tmp_path, "--no-reuse")
    assert seen.read_text() == "<unset>"
    decoy = write_files(tmp_path / "decoy", {"x.so": b"\x7fELF"})
    before = snapshot(decoy)
    shutil.rmtree(cache / "triton")
    (cache / "triton").symlink_to(decoy, target_is_directory=True)
    _verify(cli, tiny, tmp_path, "--no-reuse")
    assert seen.read_text() == "<unset>"
    assert snapshot(decoy) == before
