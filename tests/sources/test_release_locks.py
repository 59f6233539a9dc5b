"""A release spec the index lacks leaves nothing in the cache: no lock file either."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.support.archives import sdist
from tests.support.index import Index
from tests.support.series import index_series


def test_a_release_the_index_lacks_leaves_no_lock(
    cli: Callable[..., Result], index: Index, tmp_path: Path
) -> None:
    index.add("vllm-0.32.0.tar.gz", sdist("0.32.0", files=2))
    series = index_series(tmp_path)
    cache = Path(os.environ["BAKERY_CACHE_DIR"])
    r = cli("check", series, "--vllm", "0.32.9")
    assert r.exit_code == 2, r.output
    locks = cache / "locks"
    assert not locks.exists() or not any(locks.glob("vllm-0.32.9*")), list(locks.iterdir())
    # a release it has is still fetched, and locked while it is
    r = cli("check", series, "--vllm", "0.32")
    assert r.exit_code == 0, r.output
    assert (cache / "trees" / "vllm-0.32.0.json").is_file()
