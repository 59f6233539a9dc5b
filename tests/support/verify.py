"""Runs of a tests folder through the verify plan, as every command makes them
(bakery.verifying.plan.build), for tests that have a tests folder and a tree but no
project around them."""

from __future__ import annotations

from pathlib import Path

from bakery.sources.cache import Cache
from bakery.verifying import plan as plans
from bakery.verifying.runner import VerifyResult, run_verify


def run_tests(
    tests: Path,
    tree: Path,
    *,
    series_dir: Path | None = None,
    cache_root: Path | None = None,
    reuse: bool = True,
    **options: object,
) -> VerifyResult:
    """run_verify of the plan built from these inputs (``options``: VerifyOptions'
    fields, ``pytest_args`` as any sequence). With ``cache_root``, results are recorded
    there (and reused unless ``reuse`` is False); without, neither."""
    if "pytest_args" in options:
        options["pytest_args"] = tuple(options["pytest_args"])  # type: ignore[arg-type]
    policy = plans.Reuse.OFF
    if cache_root is not None:
        policy = plans.Reuse.REUSE if reuse else plans.Reuse.RECORD
    opts = plans.VerifyOptions(reuse=policy, **options)  # type: ignore[arg-type]
    cache = Cache(cache_root) if cache_root is not None else None
    return run_verify(plans.build(tests, tree, opts, series_dir=series_dir, cache=cache))
