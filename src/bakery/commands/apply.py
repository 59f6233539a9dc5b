"""``bakery apply`` and ``bakery check``: resolve the series and the pristine tree, plan and
bake (or only plan), with the three-way fallback; ``check --up-to-date``; and the record of
each series' last apply (verify's default tree). Nothing here prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bakery import project
from bakery.bake.plan import Events, plan
from bakery.bake.staging import display_path
from bakery.bake.tree import bake
from bakery.errors import BakeryError, ReportedError, UsageError
from bakery.model.identity import Identity
from bakery.model.report import BakeReport
from bakery.patch.series import Series, load_series
from bakery.project import project_root
from bakery.sources import resolve as sources
from bakery.sources.cache import Cache, CacheChanged
from bakery.sources.identity import identify
from bakery.sources.pristine import Pristine, Progress

if TYPE_CHECKING:
    from bakery.bake.merge import Fallback


def _pristine(
    series: Series,
    spec: str | None,
    cache: Cache,
    allow_dirty: bool,
    progress: Progress | None,
    defer_check: bool = False,
) -> Pristine:
    spec = spec or series.base
    if not spec:
        raise UsageError(f"series {series.name} names no base release: pass --vllm")
    return sources.resolve(
        spec, cache, allow_dirty=allow_dirty, progress=progress, defer_check=defer_check
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


def _prepare(
    series_spec: str,
    vllm: str | None,
    *,
    allow_dirty: bool,
    use_port: bool,
    progress: Progress | None,
    cache: Cache | None = None,
    defer_check: bool = False,
    with_fixes: bool = False,
    events: Events | None = None,
) -> tuple[Series, Pristine, Cache]:
    series = load_series(series_spec)
    cache = cache or Cache()
    try:
        series.require_diffs()
        series.load_diffs()  # a bad diff is reported before any download
        pristine = _pristine(series, vllm, cache, allow_dirty, progress, defer_check)
        pristine.identity = identify(pristine, cache)
        claimed = pristine.version or pristine.identity.claims
        port = port_dir(series, claimed) if use_port else None
        if port is not None:
            series.use_port(port)
            if not pristine.identity.pristine and events:
                events("identity", foreign_port_line(pristine.identity, port))
        if with_fixes:
            series.use_fixes(pristine.version)
        series.load_diffs()
    except BakeryError as e:
        raise ReportedError(
            e, BakeReport(series.name, display_path(series.path), error=e.message)
        ) from None
    return series, pristine, cache


def _fallback(
    series: Series,
    pristine: Pristine,
    cache: Cache,
    merge: bool,
    progress: Progress | None,
    defer_check: bool = False,
) -> Fallback:
    from bakery.bake.merge import make_fallback

    return make_fallback(
        series, pristine, cache, merge=merge, progress=progress, defer_check=defer_check
    )


def apply(
    series_spec: str,
    *,
    vllm: str | None = None,
    out: Path | None = None,
    fuzz: int = 0,
    keep_failed: bool = False,
    allow_dirty: bool = False,
    use_port: bool = True,
    merge: bool = True,
    force: bool = False,
    events: Events | None = None,
    progress: Progress | None = None,
    cache: Cache | None = None,
    remember: bool = True,
    with_fixes: bool = False,
) -> BakeReport:
    """remember: note the baked tree as the series' last apply (verify's default tree);
    matrix workers do not."""
    # A cached tree is checked for changes (git status) while the bake copies it; if it
    # had changed, the entry is extracted again and the bake done again, once.
    for again in (False, True):
        series, pristine, cache = _prepare(
            series_spec,
            vllm,
            allow_dirty=allow_dirty,
            use_port=use_port,
            progress=progress,
            cache=cache,
            defer_check=not again,
            with_fixes=with_fixes,
            events=events,
        )
        if events:
            for note in cache.notes:
                events("detected", note)
        cache.notes.clear()
        try:
            return _apply(
                series,
                pristine,
                cache,
                out,
                fuzz=fuzz,
                keep_failed=keep_failed,
                merge=merge,
                force=force,
                events=events,
                progress=progress,
                defer_check=not again,
                remember=remember,
            )
        except CacheChanged as e:
            if events:
                events("detected", e.message)
        finally:
            pristine.close()
    raise AssertionError("unreachable: the second pass does not defer its check")


def _apply(
    series: Series,
    pristine: Pristine,
    cache: Cache,
    out: Path | None,
    *,
    fuzz: int,
    keep_failed: bool,
    merge: bool,
    force: bool,
    events: Events | None,
    progress: Progress | None,
    defer_check: bool,
    remember: bool,
) -> BakeReport:
    if out is None:
        label = pristine.version or Path(pristine.source).name or "tree"
        out = project_root() / "build" / f"{series.name}-{label}"
    base: Pristine | None = None
    try:
        _refuse_in_cache(out, cache)
        fallback = _fallback(series, pristine, cache, merge, progress, defer_check)
        base = fallback.base
        report = bake(
            series,
            pristine,
            out,
            fuzz=fuzz,
            keep_failed=keep_failed,
            force=force,
            fallback=fallback,
            events=events,
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
    if report.status == "baked" and remember:
        cache.path(".")  # the cache folder and its README
        project.remember(cache.root / project.LAST_BAKES, series.name, out)
    return report


def _refuse_in_cache(out: Path, cache: Cache) -> None:
    """--out inside bakery's cache would be removed by the next bake that rebuilds the
    entry it sits in (the base release's as much as the target's)."""
    root = cache.root.resolve()
    where = out.resolve()
    if where == root or root in where.parents:
        raise UsageError(f"--out {out}: inside bakery's cache {root}; choose another --out")


def check(
    series_spec: str,
    *,
    vllm: str | None = None,
    fuzz: int = 0,
    allow_dirty: bool = False,
    use_port: bool = True,
    merge: bool = True,
    events: Events | None = None,
    progress: Progress | None = None,
    cache: Cache | None = None,
) -> BakeReport:
    series, pristine, cache = _prepare(
        series_spec,
        vllm,
        allow_dirty=allow_dirty,
        use_port=use_port,
        progress=progress,
        cache=cache,
        events=events,
    )
    try:
        return plan(
            series,
            pristine,
            fuzz=fuzz,
            fallback=_fallback(series, pristine, cache, merge, progress),
            events=events,
        ).report
    except BakeryError as e:
        raise ReportedError(
            e, BakeReport(series.name, display_path(series.path), error=e.message)
        ) from None


def up_to_date(
    series_spec: str, events: Events | None = None, vllm: str | None = None
) -> list[str]:
    """Stale ports of the series: every port, or with ``vllm`` a release version, only that
    release's port (where CI has that release cached; a path or git+ spec checks them all)."""
    from packaging.version import InvalidVersion, Version

    from bakery.porting import refresh

    try:
        only = Version(vllm) if vllm else None
    except InvalidVersion:
        only = None
    return refresh.stale_ports(load_series(series_spec), Cache(), events=events, only=only)
