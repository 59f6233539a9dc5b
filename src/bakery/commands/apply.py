"""``bakery apply`` and ``bakery check``: resolve the series and the pristine tree, plan and
bake (or only plan), with the three-way fallback; ``check --up-to-date``; and the record of
each series' last apply (verify's default tree). Nothing here prints."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakery import project
from bakery.bake.plan import plan
from bakery.bake.staging import display_path
from bakery.bake.tree import bake
from bakery.context import Context
from bakery.errors import BakeryError, ReportedError, UsageError
from bakery.model.identity import Identity
from bakery.model.report import BakeReport
from bakery.patch.series import Series, load_series
from bakery.project import project_root
from bakery.sources import resolve as sources
from bakery.sources.cache import Cache, CacheChanged
from bakery.sources.identity import identify
from bakery.sources.pristine import Pristine

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from bakery.bake.merge import Fallback


@dataclass(frozen=True)
class BakeOptions:
    """What ``check`` is asked (``apply`` too): the tree, and how the diffs may land."""

    vllm: str | None = None  #: the pristine tree's spec; None: the series' base
    fuzz: int = 0
    allow_dirty: bool = False
    use_port: bool = True
    merge: bool = True
    with_fixes: bool = False
    #: a stale port: carry the series' change onto it (issue 45), else stop with exit 1
    carry_stale: bool = True


@dataclass(frozen=True)
class ApplyOptions(BakeOptions):
    """``apply``'s own: where the tree goes and what may be replaced. ``remember``: note
    the baked tree as the series' last apply (verify's default tree); matrix rows and
    bisect steps do not."""

    out: Path | None = None
    keep_failed: bool = False
    force: bool = False
    remember: bool = True


def _pristine(
    ctx: Context, series: Series, spec: str | None, allow_dirty: bool, defer_check: bool
) -> Pristine:
    spec = spec or series.base
    if not spec:
        raise UsageError(f"series {series.name} names no base release: pass --vllm")
    return sources.resolve(
        spec, ctx.cache, allow_dirty=allow_dirty, progress=ctx.progress, defer_check=defer_check
    )


def foreign_port_line(identity: Identity, port: Path) -> str:
    """What is said when a release's port is taken for a tree that is not that release."""
    return (
        f"warning: {identity.line()}; the port {display_path(port)} was proven on the "
        f"pristine {identity.claims}, not on this tree (--strict fails on it)"
    )


def port_dir(series: Series, version: str | None, home: Path | None = None) -> Path | None:
    if not version:
        return None
    d = (home or project_root()) / "patches" / series.name / version
    return d if (d / "").is_dir() and any(d.glob("*.diff")) else None


def in_step(ctx: Context, series: Series, port: Path) -> Path:
    """The port to bake from: ``port`` where it is in step with the series (or has no
    record to tell: a warning says so), else the port with the series' change carried
    onto it (porting.update.carry; the bake is then reported as carried, unverified), or
    StalePort (exit 1, the next command) where the change does not merge."""
    from bakery.patch import provenance

    record = provenance.read(port)
    if record is None or not provenance.stale_lines(series.path, port, record):
        return port
    from bakery.porting.update import carry

    return carry(ctx, series, port)


def _prepare(
    ctx: Context, series_spec: str, opts: BakeOptions, *, defer_check: bool = False
) -> tuple[Series, Pristine]:
    series = load_series(series_spec, ctx.home)
    try:
        series.require_diffs()
        series.load_diffs()  # a bad diff is reported before any download
        pristine = _pristine(ctx, series, opts.vllm, opts.allow_dirty, defer_check)
        pristine.identity = identify(pristine, ctx.cache)
        claimed = pristine.version or pristine.identity.claims
        port = port_dir(series, claimed, ctx.home) if opts.use_port else None
        if port is not None:
            if opts.carry_stale:
                port = in_step(ctx, series, port)
            series = series.with_port(port)
            if not pristine.identity.pristine:
                _log.info(foreign_port_line(pristine.identity, port), extra={"event": "identity"})
        if opts.with_fixes:
            series = series.with_fixes(pristine.version)
        series.load_diffs()
    except BakeryError as e:
        raise ReportedError(
            e, BakeReport(series.name, display_path(series.path), error=e.message)
        ) from None
    return series, pristine


def _fallback(
    ctx: Context, series: Series, pristine: Pristine, merge: bool, defer_check: bool = False
) -> Fallback:
    from bakery.bake.merge import make_fallback

    return make_fallback(series, pristine, ctx, merge=merge, defer_check=defer_check)


def apply(ctx: Context, series_spec: str, opts: ApplyOptions) -> BakeReport:
    """Bake the series into a new tree (``opts.out``, default build/SERIES-VERSION/)."""
    # A cached tree is checked for changes (git status) while the bake copies it; if it
    # had changed, the entry is extracted again and the bake done again, once.
    for again in (False, True):
        series, pristine = _prepare(ctx, series_spec, opts, defer_check=not again)
        for note in ctx.cache.notes:
            _log.info(note, extra={"event": "detected"})
        ctx.cache.notes.clear()
        try:
            return _apply(ctx, series, pristine, opts, defer_check=not again)
        except CacheChanged as e:
            _log.info(e.message, extra={"event": "detected"})
        finally:
            pristine.close()
    raise AssertionError("unreachable: the second pass does not defer its check")


def _apply(
    ctx: Context, series: Series, pristine: Pristine, opts: ApplyOptions, *, defer_check: bool
) -> BakeReport:
    out = opts.out
    if out is None:
        label = pristine.version or Path(pristine.source).name or "tree"
        out = ctx.home / "build" / f"{series.name}-{label}"
    base: Pristine | None = None
    try:
        _refuse_in_cache(out, ctx.cache)
        fallback = _fallback(ctx, series, pristine, opts.merge, defer_check)
        base = fallback.base
        report = bake(
            series,
            pristine,
            out,
            fuzz=opts.fuzz,
            keep_failed=opts.keep_failed,
            force=opts.force,
            fallback=fallback,
        )  # it confirms both trees
    except CacheChanged:
        raise
    except BakeryError as e:
        raise ReportedError(
            e,
            BakeReport(
                series.name,
                display_path(series.path),
                error=e.message,
                version=pristine.version,
                source=pristine.source,
                sha256=pristine.sha256,
                commit=pristine.commit,
                identity=pristine.identity,
            ),
        ) from None
    finally:
        if base is not None:
            base.close()
    if report.status == "baked":
        from bakery.commands import proof

        report.proof = proof.of_tree(ctx.cache.root, out, report.proof)
    if report.status == "baked" and opts.remember:
        ctx.cache.path(".")  # the cache folder and its README
        project.remember(ctx.cache.root / project.LAST_BAKES, series.name, out)
    return report


def _refuse_in_cache(out: Path, cache: Cache) -> None:
    """--out inside bakery's cache would be removed by the next bake that rebuilds the
    entry it sits in (the base release's as much as the target's)."""
    root = cache.root.resolve()
    where = out.resolve()
    if where == root or root in where.parents:
        raise UsageError(f"--out {out}: inside bakery's cache {root}; choose another --out")


def check(ctx: Context, series_spec: str, opts: BakeOptions) -> BakeReport:
    """The same run as apply, planned in memory: no tree is written."""
    from bakery.commands import proof

    series, pristine = _prepare(ctx, series_spec, opts)
    try:
        planned = plan(
            series,
            pristine,
            fuzz=opts.fuzz,
            fallback=_fallback(ctx, series, pristine, opts.merge),
        )
        # the proof of the tree apply would write, as apply and matrix give it (issue 45)
        planned.report.proof = proof.of_plan(ctx.cache.root, pristine, planned)
        return planned.report
    except BakeryError as e:
        raise ReportedError(
            e, BakeReport(series.name, display_path(series.path), error=e.message)
        ) from None


def up_to_date(ctx: Context, series_spec: str, vllm: str | None = None) -> list[str]:
    """Stale ports of the series: every port, or with ``vllm`` a release version, only that
    release's port (where CI has that release cached; a path or git+ spec checks them all)."""
    from packaging.version import InvalidVersion, Version

    from bakery.porting import writer

    try:
        only = Version(vllm) if vllm else None
    except InvalidVersion:
        only = None
    return writer.stale_ports(ctx, load_series(series_spec, ctx.home), only=only)
