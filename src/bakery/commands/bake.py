"""What each command does, as functions that take their inputs and return results.

The CLI (cli.py) parses options and renders; these functions resolve series and sources,
run the core, and raise BakeryError subclasses. They never print.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bakery.bake.plan import Events, plan
from bakery.bake.report import BakeReport
from bakery.bake.staging import display_path
from bakery.bake.tree import bake
from bakery.errors import BakeryError, ReportedError, UsageError
from bakery.patch.series import Series, load_series, project_root
from bakery.sources import resolve as sources
from bakery.sources.cache import Cache, CacheChanged
from bakery.sources.resolve import Pristine, Progress

if TYPE_CHECKING:
    from bakery.bake.merge import Fallback
    from bakery.testing.runner import VerifyResult


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
) -> tuple[Series, Pristine, Cache]:
    series = load_series(series_spec)
    cache = cache or Cache()
    try:
        series.load_diffs()  # a bad diff is reported before any download
        pristine = _pristine(series, vllm, cache, allow_dirty, progress, defer_check)
        port = port_dir(series, pristine.version) if use_port else None
        if port is not None:
            series.use_port(port)
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
            ),
        ) from None
    finally:
        if base is not None:
            base.close()
    if report.status == "baked" and remember:
        _remember(series.name, out, cache)
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

    from bakery.bake import refresh

    try:
        only = Version(vllm) if vllm else None
    except InvalidVersion:
        only = None
    return refresh.stale_ports(load_series(series_spec), Cache(), events=events, only=only)


# --- the last bake of each series (verify's default tree) -------------------------------------
# Kept in bakery's own folder (the cache), by project: apply never writes into the
# working directory or the project beyond --out.


def _last_file(cache: Cache | None = None) -> Path:
    return (cache or Cache()).root / "last-bakes.json"


def _remember(series: str, out: Path, cache: Cache) -> None:
    """The tree of the series' last ``bakery apply`` (the last key of the project's:
    the last apply of all)."""
    from bakery.bake.report import write_json

    path = _last_file(cache)
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError, RecursionError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    project = str(project_root().absolute())
    mine = data.get(project)
    mine = mine if isinstance(mine, dict) else {}
    mine.pop(series, None)
    mine[series] = str(out.absolute())
    data[project] = mine
    try:
        cache.path(".")  # the cache folder and its README
        write_json(path, data)
    except OSError:
        pass  # only a convenience for verify: never fails a bake


def _last_applies() -> dict[str, str]:
    try:
        data = json.loads(_last_file().read_text())
        mine = data[str(project_root().absolute())]
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return {}
    if not isinstance(mine, dict):
        return {}
    return {str(k): v for k, v in mine.items() if isinstance(v, str)}


def last_tree(series: str) -> Path | None:
    p = _last_applies().get(series)
    return Path(p) if p and Path(p).is_dir() else None


def _default_series(tree: Path | None) -> str:
    """verify's series when none is named: the one the tree was baked from, else the
    project's only series, else the series of the last ``bakery apply``."""
    from bakery.bake.report import read_manifest

    if tree is not None:
        manifest = read_manifest(tree) or {}
        baked = manifest.get("series") or {}
        for key in ("path", "name"):
            if isinstance(baked, dict) and baked.get(key):
                candidate = str(baked[key])
                if key == "name" or Path(candidate).is_dir():
                    return candidate
        raise UsageError(f"--tree {tree}: not a baked tree (no manifest); name the series")
    launcher = project_root() / "launcher"
    names = sorted(p.name for p in launcher.glob("*") if (p / "diffs").is_dir())
    if len(names) == 1:
        return names[0]
    applied = list(_last_applies())
    if applied:
        return applied[-1]
    raise UsageError(
        f"verify: name the series (the project has {len(names)}) or run `bakery apply` first"
    )


# --- list --------------------------------------------------------------------------------------


def list_series(spec: str | None) -> list[dict[str, Any]]:
    home = project_root()
    if spec:
        names = [spec]
    else:
        names = sorted(p.name for p in (home / "launcher").glob("*") if (p / "diffs").is_dir())
        if not names:
            from bakery.errors import SeriesError
            from bakery.patch.series import where_series_are

            raise SeriesError(f"no series{where_series_are(home)}")
    rows = []
    for name in names:
        s = load_series(name, home)
        ports = (
            sorted(p.name for p in (home / "patches" / s.name).glob("*") if p.is_dir())
            if (home / "patches" / s.name).is_dir()
            else []
        )
        rows.append(
            {
                "name": s.name,
                "path": str(s.path),
                "base": s.base,
                "root": s.root,
                "strip": s.strip,
                "description": s.description,
                "ports": ports,
                "diffs": [
                    {
                        "name": d.name,
                        "sha256": d.sha256,
                        "files": [
                            fp.new_name if not fp.is_delete else fp.old_name for fp in d.files
                        ],
                        "hunks": sum(len(fp.hunks) for fp in d.files),
                    }
                    for d in s.load_diffs()
                ],
            }
        )
    return rows


# --- verify -------------------------------------------------------------------------------------


def edited_files(tree: Path) -> list[str]:
    """Files the bake wrote whose content changed since (users verify fixes before they
    refresh a port); the tree's other files are the pristine release's."""
    import hashlib

    from bakery.bake import manifest as manifests
    from bakery.safety import paths

    manifest = manifests.read(tree)
    files = manifest.files if manifest is not None else {}
    changed = []
    for rel, sha in sorted(files.items()):
        p = paths.inside(tree, rel, f"--tree {tree}: manifest")
        regular = p.is_file() and not p.is_symlink()
        now = hashlib.sha256(p.read_bytes()).hexdigest() if regular else None
        if now != sha:
            changed.append(rel)
    return changed


def choose_device(interpret: bool | None) -> tuple[bool, str]:
    """(interpret, where the tests run, in words). None: a GPU when torch sees one, else
    the CPU; verify and matrix --verify both decide here, and say what they chose."""
    if interpret is None:
        from bakery.testing.runner import cuda_available

        if cuda_available():
            return False, "on the GPU (found one; --interpret for the CPU)"
        return True, "on the CPU with Triton's interpreter (no CUDA GPU visible)"
    if interpret:
        return True, "on the CPU with Triton's interpreter (--interpret)"
    return False, "on the GPU (--gpu)"


def verify(
    series_spec: str | None,
    *,
    tree: Path | None,
    interpret: bool | None,
    junit: Path | None,
    pytest_args: list[str],
    log: Path | None = None,
    events: Events | None = None,
    jobs: int | None = None,
) -> tuple[VerifyResult, list[str]]:
    """Run the series' bundled tests against a baked tree: (result, files edited since
    the bake). The tree: ``tree``, else the series' last ``bakery apply`` (never a
    matrix worker's); ``events`` hears which tree, and where the tests run."""
    from bakery.errors import VerifyError
    from bakery.testing.runner import check_inputs, run_verify

    series = load_series(series_spec or _default_series(tree))
    if series.tests is None:
        raise VerifyError(f"series {series.name} has no tests/ folder")
    why = "--tree"
    if tree is None:
        tree, why = last_tree(series.name), f"the last `bakery apply {series.name}`"
    if tree is None:
        raise VerifyError(
            f"no baked tree for {series.name}: run `bakery apply "
            f"{series.name}` first, or pass --tree"
        )
    if not tree.is_dir():
        raise VerifyError(f"--tree {tree}: no such folder")
    interpret, where = choose_device(interpret)
    check_inputs(series.tests, tree, interpret)  # bad input is one line, before any other
    if events:
        events("verify", f"verifying {display_path(tree)} ({why}) {where}")
    edited = edited_files(tree)
    result = run_verify(
        series.tests,
        tree,
        interpret=interpret,
        pytest_args=pytest_args,
        junit=junit,
        log=log,
        series_dir=series.path,
        jobs=jobs,
    )
    return result, edited
