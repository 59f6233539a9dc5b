"""``bakery port --update``: carry a change of the series into each port made before it.

A port records the series' diffs it was made from (:mod:`bakery.patch.provenance`). When
the series changes, the change between the old and the new series diff (the interdiff)
is what the port lacks. It is carried the way ``bakery port`` carries a series to a new
release, by a three-way merge per file, first by lines (``git merge-file``) and, where
lines conflict in a Python file, by syntax (:mod:`bakery.bake.synmerge`):

- *base*: the base release with the old series diffs applied up to diff k;
- *theirs*: the base release with the new series diffs applied up to diff k;
- *ours*: the port's release with the port's diffs applied up to diff k.

The merged state after each diff gives the new port's diff k (its change from the state
after diff k-1), rendered as ``bakery refresh`` renders a port. Only a result that bakes
from its own diffs and that verify passes is written; what cannot be merged is left as a
conflict tree (the old port baked, the merged files with their conflict markers in the
working tree) with the files and lines named, for a person to resolve and ``bakery
refresh``. The old series diffs are read back from the project's git history by the blob
ids the record holds (``git cat-file``, through :mod:`bakery.git.cmd`).
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.merge import merge_file
from bakery.bake.plan import CARRIED, Plan, plan
from bakery.bake.staging import display_path
from bakery.bake.tree import bake, failed_state
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.git import cmd as gitutil
from bakery.logs import muted
from bakery.model import records
from bakery.model.manifest import CARRIES, UPDATE_FILES
from bakery.model.report import MANIFEST
from bakery.patch import provenance
from bakery.patch.series import Series, load_series
from bakery.porting.writer import Change, render_port
from bakery.safety import paths
from bakery.sources.pristine import Pristine
from bakery.sources.resolve import release
from bakery.verifying import plan as plans
from bakery.verifying.runner import run_verify

_log = logging.getLogger(__name__)

_MARKER = re.compile(rb"^<<<<<<< ", re.MULTILINE)


@dataclass
class Updated:
    """What became of one port."""

    release: str
    port: str
    #: current | carried | written | conflict | failed | cannot
    state: str
    stale: list[str] = field(default_factory=list)
    verify: str | None = None
    #: (diff, path, line) of each conflict left to resolve
    conflicts: list[dict[str, object]] = field(default_factory=list)
    conflict_tree: str | None = None
    why: str | None = None


@dataclass
class UpdateResult:
    series: str
    ports: list[Updated] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return all(p.state in ("current", "carried", "written") for p in self.ports)

    def to_json(self) -> dict[str, object]:
        return {
            "series": self.series,
            "ok": self.ok,
            "dry_run": self.dry_run,
            "ports": records.plain(self.ports),
        }


State = dict[str, bytes | None]


def _states(pl: Plan) -> list[State]:
    """The files written so far after each diff of a plan (cumulative)."""
    out: list[State] = []
    cur: State = {}
    for writes in pl.writes:
        cur = {**cur, **{p: c for p, (c, _mode) in writes.items()}}
        out.append(cur)
    return out


def _aligned(names: list[str], own: list[str], states: list[State]) -> list[State]:
    """States indexed by the new series' diff names: a diff the side lacks changes nothing."""
    by_name = dict(zip(own, states, strict=True))
    out: list[State] = []
    cur: State = {}
    for n in names:
        cur = by_name.get(n, cur)
        out.append(cur)
    return out


def _merge(
    ours: bytes | None, base: bytes | None, theirs: bytes | None, path: str
) -> tuple[bytes | None, bool]:
    """(content, conflicted): the series' change base -> theirs carried into ours."""
    if base == theirs:
        return ours, False
    if ours == base:
        return theirs, False
    if ours is None or base is None or theirs is None:
        return ours, True  # a file added or removed on one side only: a person decides
    merged, n = merge_file(ours, base, theirs)
    if n == 0:
        return merged, False
    if path.endswith(".py"):
        from bakery.bake.synchild import Bounded, merge_bounded
        from bakery.bake.synmerge import SyntaxConflict

        try:  # release content: in a bounded child, within the command's budget
            return merge_bounded(base, theirs, ours).content, False
        except (SyntaxConflict, Bounded):
            pass
    return merged, True


@dataclass
class _Sides:
    """The three plans of one port's update, and the files they read."""

    names: list[str]
    old: list[dict[str, bytes | None]]
    new: list[dict[str, bytes | None]]
    port: list[dict[str, bytes | None]]
    base: Pristine
    target: Pristine

    def file(self, side: str, k: int, path: str) -> bytes | None:
        states: list[dict[str, bytes | None]] = getattr(self, side)
        if k >= 0 and path in states[k]:
            return states[k][path]
        tree = self.target if side == "port" else self.base
        f = tree.file(path)
        return f.read_bytes() if f.is_file() and not f.is_symlink() else None


def _carry(sides: _Sides) -> tuple[list[list[Change]], list[tuple[int, str, bytes]]]:
    """Per diff, the new port's (path, before, after); and the conflicts (diff, path, text)."""
    per_diff: list[list[Change]] = []
    conflicts: list[tuple[int, str, bytes]] = []
    merged_prev: dict[str, bytes | None] = {}
    for k in range(len(sides.names)):
        touched = set(sides.old[k]) | set(sides.new[k]) | set(sides.port[k])
        changes: list[Change] = []
        for path in sorted(touched):
            content, bad = _merge(
                sides.file("port", k, path),
                sides.file("old", k, path),
                sides.file("new", k, path),
                path,
            )
            if bad:
                conflicts.append((k, path, _conflict_text(sides, k, path)))
            before = merged_prev.get(path, sides.file("port", -1, path))
            if content != before:
                changes.append((path, before, content))
            merged_prev[path] = content
        per_diff.append(changes)
    return per_diff, conflicts


def _conflict_text(sides: _Sides, k: int, path: str) -> bytes:
    ours, base, theirs = (sides.file(s, k, path) for s in ("port", "old", "new"))
    merged, _ = merge_file(ours or b"", base or b"", theirs or b"")
    return merged


def _old_series(series: Series, record: provenance.Record, home: Path, scratch: Path) -> Series:
    """The series as the port was made from it: each diff read back by its blob id."""
    folder = scratch / "old-series"
    folder.mkdir(parents=True)
    for name, entry in record.diffs.items():
        now = series.path / "diffs" / name
        data = now.read_bytes() if now.is_file() else None
        if data is None or provenance.Entry.of(data) != entry:
            data = gitutil.stdout_of(gitutil.git(home, "cat-file", "blob", entry.blob, raw=True))
        if data is None or provenance.Entry.of(data).sha256 != entry.sha256:
            raise BakeryError(
                f"{name} @ {provenance.short(entry.sha256)} is not in the project's git "
                "history: its change cannot be computed (make the port again: bakery port)"
            )
        (folder / name).write_bytes(data)
    old = load_series(str(series.path), home)
    old = old.with_port(folder)
    return old


def _check_names(series: Series, port: Series, old: Series) -> list[str]:
    names = [d.name for d in series.load_diffs()]
    own = [d.name for d in old.load_diffs()]
    if [n for n in names if n in own] != own or [d.name for d in port.load_diffs()] != own:
        raise BakeryError(
            "the series' diffs were removed or reordered since the port was made "
            "(only changed and added diffs are carried): make the port again"
        )
    return names


def update(
    ctx: Context,
    series_spec: str,
    *,
    vllm: str | None = None,
    out_root: Path | None = None,
    interpret: bool = True,
    write: bool = True,
) -> UpdateResult:
    home = ctx.home
    out_root = out_root if out_root is not None else home / "build" / "port"
    series = load_series(series_spec, home)
    if not series.base:
        raise UsageError(f"series {series.name} names no base release: nothing to update from")
    root = home / "patches" / series.name
    ports = sorted(p for p in (root.iterdir() if root.is_dir() else []) if p.is_dir())
    if vllm is not None:
        ports = [p for p in ports if p.name == vllm]
        if not ports:
            raise UsageError(f"{series.name} has no port for {vllm} (patches/{series.name}/{vllm})")
    from bakery.bake.synchild import budget

    result = UpdateResult(series.name, dry_run=not write)
    with budget():  # one bound for the syntax merges of every port updated
        for port_dir in ports:
            result.ports.append(_one(ctx, series_spec, port_dir, out_root, interpret, write))
    return result


def _one(
    ctx: Context, spec: str, port_dir: Path, out_root: Path, interpret: bool, write: bool
) -> Updated:
    series = load_series(spec, ctx.home)
    rel = display_path(port_dir)
    record = provenance.read(port_dir)
    stale = provenance.stale_lines(series.path, port_dir, record)
    res = Updated(port_dir.name, str(rel), "current", stale)
    if not stale:
        return res
    if record is None:
        res.state, res.why = "cannot", "no record of the series diffs it was made from"
        return res
    _log.info(f"Carrying the series' change into {rel}", extra={"event": "port"})
    scratch = (out_root / f"{series.name}-{port_dir.name}-update").absolute()
    try:
        regular_port(port_dir, ctx.home)
    except BakeryError as e:
        res.state, res.why = "cannot", e.message
        return res
    _clear(scratch)
    try:
        job = _Job(series, spec, port_dir, record, ctx.home, scratch, interpret, write)
        _carry_into(ctx, job, res)
    except BakeryError as e:
        res.state, res.why = "cannot", e.message
    return res


def regular_port(port_dir: Path, home: Path) -> None:
    """Refuse a port that is not a folder of regular files inside the project: ``--update``
    copies its other files into the new port and ``--promote`` writes its PROVENANCE.md, so
    a link there (a NOTES.md naming a user's secret) would become a copy of what it names,
    ready to commit, or a write outside the project; a subfolder would be dropped."""
    if port_dir.is_symlink() or not port_dir.resolve().is_relative_to(home.resolve()):
        raise paths.UnsafeDataError(
            f"{display_path(port_dir)} is a link out of the project's patches/; bakery "
            "copies and writes only regular files inside the project"
        )
    for f in sorted(port_dir.iterdir()):
        try:
            paths.regular_file(f, display_path(port_dir) or str(port_dir))
        except paths.UnsafeDataError as e:
            raise paths.UnsafeDataError(
                f"{e.message}; a port holds only regular files (bakery copies and writes "
                "nothing else): replace it with the file, or move it out of the port"
            ) from None


def _clear(scratch: Path) -> None:
    """The scratch folder of an earlier update, unless its conflict tree holds edits."""
    tree = scratch / "tree"
    if (tree / MANIFEST).is_file() and gitutil.dirty(tree) and not _untouched(tree):
        raise UsageError(
            f"{tree}: holds changes made since bakery wrote it; bakery will not overwrite "
            "it (refresh it into the port, or move it away)"
        )
    state = failed_state(scratch / "tree.failed")
    if state not in (None, "unchanged"):
        raise UsageError(f"{scratch / 'tree.failed'}: {state}; bakery will not overwrite it")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)


def _untouched(tree: Path) -> bool:
    """A conflict tree as update left it: its files are what the manifest says it wrote."""
    import hashlib

    from bakery.model import manifest as manifests

    found = manifests.read(tree)
    left = (found.update_files if found is not None else None) or {}
    for line in gitutil.dirty(tree):
        rel = line[3:]
        f = tree / rel
        got = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None
        if left.get(rel) != got:
            return False
    return True


@dataclass(frozen=True)
class _Job:
    """One port's update: the series, the port and the record it was made from, where the
    work happens, how it is proven, and whether the port is replaced."""

    series: Series
    spec: str
    port_dir: Path
    record: provenance.Record
    home: Path
    scratch: Path
    interpret: bool
    write: bool


def _carry_into(ctx: Context, job: _Job, res: Updated) -> None:
    base = release(str(job.series.base), ctx.cache)
    target = release(job.port_dir.name, ctx.cache)
    try:
        _carry_sides(job, res, base, target)
    finally:
        base.close()
        target.close()


def _carry_sides(job: _Job, res: Updated, base: Pristine, target: Pristine) -> None:
    series, home, scratch = job.series, job.home, job.scratch
    merged = _merged(series, job.spec, job.port_dir, job.record, home, scratch, base, target)
    if merged.conflicts:
        _leave_conflicts(series, merged.port, target, scratch, merged.names, merged.conflicts, res)
        return
    new_dir = _write_port(series, home, scratch / "port", merged)
    res.verify = _prove(series, job.spec, home, new_dir, target, scratch, job.interpret)
    if not res.verify.startswith("passed"):
        res.state = "failed"
        return
    res.state = "carried"
    if job.write:
        _replace(job.port_dir, new_dir)
        res.state = "written"


@dataclass
class _Merged:
    """The series' change merged into a port, diff by diff: the new port's changes, or
    the conflicts."""

    port: Series
    names: list[str]
    per_diff: list[list[Change]]
    conflicts: list[tuple[int, str, bytes]]
    strip: int
    root: str


def _merged(
    series: Series,
    spec: str,
    port_dir: Path,
    record: provenance.Record,
    home: Path,
    scratch: Path,
    base: Pristine,
    target: Pristine,
) -> _Merged:
    old = _old_series(series, record, home, scratch)
    port = load_series(spec, home)
    port = port.with_port(port_dir)
    names = _check_names(series, port, old)
    with muted():
        plans = [plan(s, p) for s, p in ((old, base), (series, base), (port, target))]
    for pl, what in zip(plans, ("the old series", "the series", "the port"), strict=True):
        if not pl.report.ok:
            raise BakeryError(f"{what} does not apply to vLLM {pl.report.version}")
    own = [[d.name for d in s.load_diffs()] for s in (old, series, port)]
    old_s, new_s, port_s = (
        _aligned(names, o, _states(pl)) for o, pl in zip(own, plans, strict=True)
    )
    per_diff, conflicts = _carry(_Sides(names, old_s, new_s, port_s, base, target))
    layout = plans[1].report.layout
    strip, root = int(layout["strip"]), str(layout["root"])  # type: ignore[call-overload]
    return _Merged(port, names, per_diff, conflicts, strip, root)


def _write_port(series: Series, home: Path, new_dir: Path, merged: _Merged) -> Path:
    """The merged port's diffs and its record (made from the current series)."""
    texts = render_port(series, home, merged.strip, merged.root, merged.per_diff)
    new_dir.mkdir()
    for name, text in zip(merged.names, texts, strict=True):
        if text:
            (new_dir / name).write_bytes(text)
    provenance.write(new_dir, provenance.of_series(series.path, "update"))
    return new_dir


class StalePort(BakeryError):
    """A stale port whose series change does not merge: the bake stops (exit 1) and says
    the next command."""

    exit_code = 1


def carry(ctx: Context, series: Series, port_dir: Path) -> Path:
    """The stale port ``port_dir`` with the series' change carried into it (the interdiff,
    merged by lines then by syntax, as ``port --update`` merges it), written, unproven,
    into ``build/port/SERIES-X-carry/port/`` for ``apply``, ``check``, ``wheel`` and
    ``sdist`` to bake from (issue 45: a stale port is never used silently). The port in
    ``patches/`` is left as it is. Where the change does not merge, or cannot be computed,
    :class:`StalePort` names the next command."""
    spec = str(series.path)
    record = provenance.read(port_dir)
    stale = provenance.stale_lines(series.path, port_dir, record)
    rel = display_path(port_dir)
    next_step = (
        f"run `bakery port {series.name} --update --vllm {port_dir.name}` (it proves the "
        "carried port, or leaves the conflicts to resolve)"
    )
    if record is None:
        raise StalePort(f"{rel}: {stale[0]}; its series change cannot be carried: {next_step}")
    scratch = (ctx.home / "build" / "port" / f"{series.name}-{port_dir.name}-carry").absolute()
    shutil.rmtree(scratch, ignore_errors=True)  # bakery's own scratch, remade whole
    scratch.mkdir(parents=True)
    _log.info(f"Carrying the series' change into the stale port {rel}", extra={"event": "port"})
    base = release(str(series.base), ctx.cache)
    target = release(port_dir.name, ctx.cache)
    try:
        merged = _merged(series, spec, port_dir, record, ctx.home, scratch, base, target)
    except BakeryError as e:
        raise StalePort(f"{rel} is stale and {e.message}: {next_step}") from None
    finally:
        base.close()
        target.close()
    if merged.conflicts:
        k, path, _ = merged.conflicts[0]
        raise StalePort(
            f"{rel} is stale ({stale[0]}) and the series' change does not merge into it "
            f"({merged.names[k]}: {path}): {next_step}"
        )
    new_dir = _write_port(series, ctx.home, scratch / "port", merged)
    (new_dir / CARRIED).write_text(json.dumps({"port": str(rel), "stale": stale}, indent=1) + "\n")
    return new_dir


def _prove(
    series: Series,
    spec: str,
    home: Path,
    new_dir: Path,
    target: Pristine,
    scratch: Path,
    interpret: bool,
) -> str:
    """Bake the updated port from its own diffs, then verify that tree."""
    s = load_series(spec, home)
    s = s.with_port(new_dir)
    with muted():
        report = bake(s, target, scratch / "baked")
    if report.status != "baked":
        return "not run: the updated diffs do not bake as written"
    if series.tests is None:
        return "not run: the series has no tests/ folder"
    try:
        options = plans.VerifyOptions(interpret=interpret, log=scratch / "verify.log")
        r = run_verify(plans.for_series(series, scratch / "baked", options))
    except BakeryError as e:
        return f"not run: {e.message}"
    if r.exit_code == 0:
        return f"passed ({r.passed} passed, {r.skipped} skipped)"
    return f"failed ({r.failed} failed, {r.passed} passed)"


def _replace(port_dir: Path, new_dir: Path) -> None:
    """The port's diffs and record replaced as a whole; its other files (PROVENANCE.md) kept."""
    import os
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix=f".{port_dir.name}.update-", dir=port_dir.parent))
    try:
        for f in port_dir.iterdir():
            paths.regular_file(f, str(display_path(port_dir)))  # checked before; again here
            if f.suffix not in (".diff", ".patch") and f.name != provenance.FILE:
                shutil.copy2(f, staging / f.name, follow_symlinks=False)
        for f in new_dir.iterdir():
            shutil.copyfile(f, staging / f.name)
        old = port_dir.with_name(f".{port_dir.name}.old-{os.getpid()}")
        os.replace(port_dir, old)
        os.replace(staging, port_dir)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _leave_conflicts(
    series: Series,
    port: Series,
    target: Pristine,
    scratch: Path,
    names: list[str],
    conflicts: list[tuple[int, str, bytes]],
    res: Updated,
) -> None:
    """The old port baked, the files the change could not be carried into left with
    their conflict markers: resolve them, then ``bakery refresh SERIES --tree``."""
    import hashlib

    tree = scratch / "tree"
    with muted():
        report = bake(port, target, tree)
    if report.status != "baked":
        raise BakeryError("the port does not bake on its own release")
    written: dict[str, str] = {}
    for k, path, text in conflicts:
        (tree / path).write_bytes(text)
        written[path] = hashlib.sha256(text).hexdigest()
        for m in _MARKER.finditer(text):
            line = text[: m.start()].count(b"\n") + 1
            res.conflicts.append({"diff": names[k], "path": path, "line": line})
    manifest = json.loads((tree / MANIFEST).read_text())
    manifest[CARRIES] = {d.name: d.sha256 for d in series.load_diffs()}
    manifest[UPDATE_FILES] = written
    (tree / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    res.state = "conflict"
    res.conflict_tree = display_path(tree)
