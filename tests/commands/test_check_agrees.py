"""`check` is `apply` without writing, and runs the engine `port` runs (issue 26): on every
commit of a local upstream history of real shapes (tests/support/dsa.py dsa_history), the
outcomes check reports, with the series' own diffs and with the port the tree claims, are
the outcomes port's planner finds for the same start."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bakery.commands.apply import BakeOptions, check
from bakery.context import Context
from bakery.errors import ReportedError
from bakery.model.report import BakeReport
from bakery.porting.propose import candidates
from bakery.sources import resolve
from bakery.sources.cache import Cache
from tests.support.dsa import cache_dsa_releases, dsa_history, dsa_series


def _kinds(report: BakeReport) -> Counter[str]:
    return Counter(h.status.value for d in report.diffs for f in d.files for h in f.hunks)


def _check(spec: str, use_port: bool) -> BakeReport:
    try:
        return check(Context.here(), "dsa", BakeOptions(vllm=spec, use_port=use_port))
    except ReportedError as e:
        assert e.report is not None
        return e.report


def test_check_and_port_agree_on_every_commit(tmp_path: Path, home: Path) -> None:
    hist = dsa_history(tmp_path / "up")
    cache_dsa_releases()
    dsa_series(home)
    picked = {
        "dsa: rename _max_with_nan's arguments",
        "dsa: move _candidate_flags_kernel next to its caller",
        "vLLM 0.33.0",
        "dsa: rewrite _block_scores_kernel's pinning",
    }
    compared: Counter[str] = Counter()
    for commit, subject in hist:
        if subject not in picked:
            continue
        spec = f"git+file://{tmp_path}/up@{commit}"
        own = _check(spec, use_port=False)
        ported = _check(spec, use_port=True)
        target = resolve.resolve(spec, Cache())
        try:
            found = {c.start.label: c for c in candidates(Context(home), "dsa", target)}
        finally:
            target.close()
        assert _kinds(own) == Counter(found["series"].kinds), subject
        compared += _kinds(own)
        if ported.port is not None:
            assert _kinds(ported) == Counter(found[f"port {Path(ported.port).name}"].kinds)
            compared += _kinds(ported)
    # merges by lines and by syntax were among what they agreed on
    assert compared["merged"] and compared["merged-syntax"], compared
