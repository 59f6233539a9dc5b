"""``bakery port SERIES --vllm X``: propose a port, prove it, write it only when proven.

Every start is planned against the release (:mod:`bakery.porting.propose`). The candidates
without a failed hunk are taken best first: each is written as a port into a scratch
folder, baked from it (so the port's own diffs are what is proven), verified with the
series' bundled tests and, where the series records inputs, compared with the previous
release's baked tree (:mod:`bakery.porting.differential`). The first that passes both
becomes ``patches/SERIES/X/`` with its provenance note. When none does, the best attempt
is left as a conflict tree and the hunks still to resolve are listed, each with the
upstream commits that touched its lines (``--upstream``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from bakery.bake.staging import display_path
from bakery.bake.tree import bake
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.logs import muted
from bakery.patch.series import Series, load_series
from bakery.porting import differential
from bakery.porting.propose import Candidate, candidates, provenance, write_port
from bakery.porting.proving import (
    PortResult,
    Tried,
    attention,
    clear_scratch,
    leave_best,
    prove,
    verify_line,
    verify_tree,
)
from bakery.sources import resolve as sources
from bakery.sources.cache import Cache
from bakery.sources.pristine import Pristine

_log = logging.getLogger(__name__)


def _previous_release(series: Series, target: str, cache: Cache) -> str | None:
    """The release before the target that the differential check compares with: the
    newest release on the index older than the target, not older than the base."""
    if not series.base:
        return None
    tv, base = Version(target), Version(series.base)
    older = [v for v in sources.release_versions() if base <= v < tv]
    return str(max(older)) if older else None


@dataclass(frozen=True)
class PortOptions:
    """What ``bakery port`` was asked for: the target (a release; a tree or ``git+URL@REF``
    that is no release goes to patches/SERIES/next/), where candidates are baked, how they
    are proven, the upstream checkout for blame, the previous release for the differential
    check, whether the port is written, and whether the syntax merge is tried."""

    vllm: str
    out_root: Path | None = None
    interpret: bool = True
    upstream: Path | None = None
    previous: str | None = None
    write: bool = True
    syntax: bool = True


def port(ctx: Context, series_spec: str, opts: PortOptions) -> PortResult:
    """Propose, prove and write a port (see the module); every syntax merge of it runs
    under one time budget (:func:`bakery.bake.synchild.budget`)."""
    from bakery.bake.synchild import budget

    with budget():
        return _port(ctx, series_spec, opts)


def _port(ctx: Context, series_spec: str, opts: PortOptions) -> PortResult:
    vllm, interpret, upstream, write, syntax = (
        opts.vllm,
        opts.interpret,
        opts.upstream,
        opts.write,
        opts.syntax,
    )
    home, cache = ctx.home, ctx.cache
    out_root = opts.out_root if opts.out_root is not None else home / "build" / "port"
    series = load_series(series_spec, home)
    series.require_diffs()
    if not sources.is_version(vllm):  # a tree that is no release: patches/SERIES/next/
        from bakery.commands.port_next import port_next

        return port_next(
            ctx,
            series_spec,
            vllm=vllm,
            out_root=out_root,
            interpret=interpret,
            write=write,
            syntax=syntax,
            upstream=upstream,
        )
    target = sources.resolve(vllm, cache)
    version = target.version or vllm
    _check_portable(series, version)
    result = PortResult(
        series.name,
        version,
        candidates(ctx, series_spec, target, syntax=syntax),
    )
    scratch = (out_root / f"{series.name}-{version}").absolute()
    clear_scratch(scratch)
    if _no_port_needed(series, result, target, scratch, interpret):
        return result
    prev_record = None
    if (series.path / differential.CASES_FILE).is_file():
        result.previous = opts.previous or _previous_release(series, version, cache)
        if result.previous:
            prev_record = _record_previous(ctx, series_spec, result.previous, scratch)
    for n, cand in enumerate(c for c in result.candidates if c.failed == 0 and not _plain(c)):
        folder = scratch / f"candidate-{n + 1}"
        tried = prove(series, cand, target, folder, interpret)
        result.tried.append(tried)
        if not tried.verify.startswith("passed"):
            continue
        if prev_record is not None and _unexplained(series, version, folder, prev_record, tried):
            continue
        tried.accepted = True
        dest = home / "patches" / series.name / version
        if write:
            # "not run" where no differential check ran (issue 45: never "no difference")
            ran = tried.differences if prev_record is not None else None
            note = provenance(cand, version, tried.verify, ran, _why_no_differential(result))
            write_port(dest, series, cand.texts, note)
        result.written, result.dry_run = display_path(dest), not write
        result.hunks = attention(cand, result.target, upstream)
        return result
    leave_best(ctx, series_spec, result, target, scratch, syntax=syntax)
    if result.candidates:
        result.hunks = attention(result.candidates[0], result.target, upstream)
    return result


def _why_no_differential(result: PortResult) -> str:
    if result.previous is None:
        return "no earlier release to compare with"
    return "the series records no differential cases"


def _plain(cand: Candidate) -> bool:
    """The series' own diffs, applying as written (at most at an offset)."""
    return cand.start.port is None and set(cand.kinds) <= {"applied", "offset"}


def _no_port_needed(
    series: Series,
    result: PortResult,
    target: Pristine,
    scratch: Path,
    interpret: bool,
) -> bool:
    """True when the series' own diffs bake and verify on the target: nothing to write."""
    cand = next((c for c in result.candidates if _plain(c)), None)
    if cand is None:
        return False
    _log.info("Verifying the series' own diffs, which apply as they are", extra={"event": "port"})
    folder = scratch / "series"
    with muted():
        report = bake(load_series(str(series.path)), target, folder / "tree")
    if report.status != "baked":
        return False
    try:
        res = verify_tree(series, folder, interpret)
    except BakeryError as e:
        result.tried.append(Tried(cand.start.label, f"not run: {e.message}"))
        return False
    line = verify_line(res.exit_code, res.passed, res.failed, res.skipped)
    result.tried.append(Tried(cand.start.label, line, accepted=res.exit_code == 0))
    result.no_port_needed = res.exit_code == 0
    return result.no_port_needed


def _check_portable(series: Series, version: str) -> None:
    if series.base == version:
        raise UsageError(f"{series.name}'s diffs are made against {version}: nothing to port")
    if not (series.path / "tests").is_dir():
        raise UsageError(f"{series.path}: no tests/ folder: a port cannot be proven")


def _unexplained(
    series: Series, version: str, folder: Path, prev_record: Path, tried: Tried
) -> bool:
    """The differential check of a verified candidate: True when an output differs from
    the previous release's and the series does not explain it for this release."""
    record = folder / "differential.pt"
    cases = series.path / differential.CASES_FILE
    differential.record(folder / "tree", cases, record, interpret=True)
    diffs = differential.compare(
        prev_record, record, differential.explained_for(series.path, version)
    )
    tried.differences = [d.line() for d in diffs]
    return any(d.explained is None for d in diffs)


def _record_previous(ctx: Context, spec: str, release: str, scratch: Path) -> Path:
    from bakery.commands.apply import ApplyOptions, apply

    tree = scratch / f"previous-{release}"
    with muted():
        report = apply(ctx, spec, ApplyOptions(vllm=release, out=tree))
    if report.status != "baked":
        raise BakeryError(f"the previous release {release} does not bake: no differential check")
    series = load_series(spec, ctx.home)
    out = scratch / f"previous-{release}.pt"
    # recorded inputs are CPU tensors: both sides run under Triton's interpreter
    differential.record(tree, series.path / differential.CASES_FILE, out, interpret=True)
    return out
