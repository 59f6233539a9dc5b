"""Issue 45 on the real dcp2 series, its 0.33.0 port hidden (the state of every new vLLM
release before its port exists). The syntax merge of 0.33.0 gives code whose launch of
``_block_scores_kernel`` no longer fits the release's kernel (upstream added
``valid_blocks`` and ``stride_scores`` among its positional parameters): it bakes no more,
it is a conflict with the reason, and no wheel is written from it. (Network: the releases
are cached in ``BAKERY_TEST_CACHE``, downloaded once.)"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import Result

from bakery.git import cmd as gitutil
from tests.support.paths import PROJECT, TEST_CACHE

pytestmark = pytest.mark.network

FILE = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"


@pytest.fixture(autouse=True)
def _dcp2_without_ports(home: Path, tmp_path: Path) -> Iterator[None]:
    """The real series, no patches/ folder: no port is ever picked."""
    cached = all((TEST_CACHE / "trees" / f"vllm-{v}.json").is_file() for v in ("0.30.0", "0.33.0"))
    if not cached:
        from bakery.sources.pipconf import configured_index

        url = urlsplit(configured_index().url)
        try:
            socket.create_connection((url.hostname or "", url.port or 443), timeout=5).close()
        except OSError:
            pytest.skip("the package index is not reachable")
    shutil.copytree(PROJECT / "launcher" / "dcp2", home / "launcher" / "dcp2")
    yield
    for p in tmp_path.iterdir():  # baked vLLM trees are large
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def test_dcp2_on_0_33_0_without_its_port_is_a_conflict_and_no_wheel(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    r = cli("apply", "dcp2", "--vllm", "0.33.0", "--json", "a.json", "--keep-failed")
    assert r.exit_code == 1, r.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["status"] == "conflict" and report["proof"] is None
    hunks = {h["index"]: h for d in report["diffs"] for f in d["files"] for h in f["hunks"]}
    broken = hunks[5]
    assert broken["status"] == "failed"
    reason = broken["reason"]
    assert reason.startswith("contract: the syntax merge's code does not fit the release: ")
    assert "_block_scores_kernel[grid](*, PIN_NEWEST=) does not pass" in reason
    assert "FULL_WIDTH, now required" in reason and "stride_row -> valid_blocks" in reason
    assert f"hunk 5: {reason}" in r.output and "does not apply" in r.output
    # the other merges stand; the attempt holds the merge with its three sides in the index
    assert sorted(h["status"] for i, h in hunks.items() if i != 5) == ["merged-syntax"] * 4 + [
        "offset"
    ]
    failed = tmp_path / "home" / "build" / "dcp2-0.33.0.failed"
    assert gitutil.git(failed, "status", "--porcelain", "--", FILE) == f"UU {FILE}\n"
    assert not (tmp_path / "home" / "build" / "dcp2-0.33.0").exists()

    w = cli("wheel", "dcp2", "--vllm", "0.33.0", "--platform", "x86_64", "--out", "dist")
    assert w.exit_code == 1, w.output
    assert "does not apply" in w.output
    assert not (tmp_path / "dist").exists()
