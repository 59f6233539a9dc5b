"""Three-way fallback, diagnosis of failed hunks, and drift warnings.

When a hunk fails on a new release and the series names its base release, bakery knows
more than GNU patch does: the base release's pristine file (the common ancestor), the same
file with the series applied (ours), and the new release's file (theirs). ``git
merge-file`` merges them without any git blobs; a clean merge is ``merged``.

What is left failed gets a reason and the action it suggests: already upstream, file moved
(found by content), or context drift. A diff that applies cleanly but whose hunks touch
Python functions or classes that changed upstream between the base and the target gets a
drift warning: such a patch can be wrong without any conflict.
"""

from __future__ import annotations

import ast
import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from bakery.context import Context
from bakery.errors import BakeryError
from bakery.git import cmd as gitutil
from bakery.patch.diffs import Diff, FilePatch
from bakery.patch.engine import FileResult, HunkResult, Outcome, apply_file
from bakery.patch.series import Series, detect_layout, load_series
from bakery.sources import resolve as sources
from bakery.sources.pristine import Pristine

if TYPE_CHECKING:  # pyindex is imported where a hunk moved, not at every start
    from bakery.checks.contracts import Reader
    from bakery.checks.pyindex import Definition
    from bakery.model.report import DiffResult


def merge_file(current: bytes, base: bytes, other: bytes) -> tuple[bytes, int]:
    """git merge-file on three byte strings: (result, number of conflicts). Conflicts are
    marked diff3-style: the base's lines between ||||||| and =======, as git's
    merge.conflictStyle=diff3 shows them."""
    return gitutil.merge_file(current, base, other, ("release", "base", "series"), diff3=True)


class _BaseSide:
    """The series' own diffs applied, file by file, to its base release."""

    def __init__(self, series: Series, base: Pristine) -> None:
        self.base = base
        self.series = series
        strip, root, _ = detect_layout(series, base.tree)
        diffs = series.load_diffs()
        for d in diffs:  # x.orig/x: the name the base release has (patch.parse)
            d.resolve_paths(strip, root, lambda rel: (base.tree / rel).is_file())
        self.by_name = {d.name: d for d in diffs}
        self.order = [d.name for d in diffs]
        self._cache: dict[tuple[str, str], tuple[bytes | None, bytes | None]] = {}
        #: (diff, path) -> the hunks' results on the base release (for the placement check).
        self.results: dict[tuple[str, str], list[HunkResult]] = {}

    def read_base(self, rel: str) -> bytes | None:
        p = self.base.tree / rel
        return p.read_bytes() if p.is_file() and not p.is_symlink() else None

    def sides(self, diff_name: str, rel: str) -> tuple[bytes | None, bytes | None]:
        """(ours before this diff, ours after it) for one file, on the base release."""
        key = (diff_name, rel)
        if key not in self._cache:
            self._cache[key] = self._sides(diff_name, rel)
        return self._cache[key]

    def _sides(self, diff_name: str, rel: str) -> tuple[bytes | None, bytes | None]:
        """A git rename's or copy's target starts from its source as the diff found it
        (ours before the diff is the source's); a rename's source is gone after it, unless
        another rename of the diff wrote it (patch.parse, bake.plan)."""
        state = self.read_base(rel)
        for k, name in enumerate(self.order):
            before = state
            made = False
            for fp in self.by_name[name].files:
                if fp.path == rel:
                    if fp.move is not None:
                        prev = self.order[k - 1] if k else None
                        src = fp.source
                        state = self.sides(prev, src)[1] if prev else self.read_base(src)
                        before, made = state, True
                    res = apply_file(fp, state, 0)
                    if not res.ok:
                        return None, None
                    self.results[(name, rel)] = res.hunks
                    state = None if res.deleted else res.content
                elif fp.move == "rename" and fp.source == rel and not made:
                    state = None
            if name == diff_name:
                return before, state
        return None, None

    def final(self, rel: str) -> bytes | None:
        """The file on the base release with the whole series applied."""
        return self.sides(self.order[-1], rel)[1] if self.order else self.read_base(rel)


class Fallback:
    """What bake.plan asks when a file does not apply cleanly, and after each diff."""

    def __init__(
        self,
        series: Series,
        target: Pristine,
        base: Pristine | None,
        merge: bool,
        *,
        syntax: bool = False,
        start: Series | None = None,
    ) -> None:
        """``start``: the diffs whose bake on ``base`` is "ours" (default: the series' own
        diffs on its base release; ``bakery port`` passes a committed port and its
        release). ``syntax``: where lines conflict in a Python file, merge by syntax."""
        # A port was made for its release: comparing the base with it says nothing new.
        self.warn = series.port is None
        self.port = series.port
        self.target = target
        self.base = base
        self.base_version = base.version if start is not None and base else series.base
        self.syntax = syntax
        side = start or load_series(str(series.path))
        self.side = _BaseSide(side, base) if base is not None and merge else None

    def resolve(
        self, diff: Diff, fp: FilePatch, current: bytes | None, res: FileResult
    ) -> FileResult:
        """Three-way merge of the failed file; always returns a diagnosed result."""
        out = self._merge(diff, fp, current, res) or res
        if not out.ok:
            diagnose(out, fp, self.target, self.base, on_base=self._on_base())
        return out

    def _on_base(self) -> bool:
        """The target is the release the series' diffs were made on (the series' own
        diffs, no port): a hunk already there was never upstream's, it is reversed."""
        return (
            self.port is None
            and self.base_version is not None
            and _is_base(self.target, self.base_version)
        )

    def _merge(
        self, diff: Diff, fp: FilePatch, current: bytes | None, res: FileResult
    ) -> FileResult | None:
        side = self.side
        if side is None or current is None or diff.name not in side.by_name:
            return None
        if any(h.status is Outcome.ALREADY for h in res.hunks):
            return None  # upstream took (part of) it: a merge would hide that
        ours_before, ours_after = side.sides(diff.name, fp.path)
        if ours_before is None or ours_after is None:
            return None
        merged, conflicts = merge_file(current, ours_before, ours_after)
        note = ""
        if conflicts and self.syntax and fp.path.endswith(".py"):
            by_syntax = self._merge_syntax(res, current, ours_before, ours_after)
            if isinstance(by_syntax, FileResult):
                return by_syntax
            note = f" ({by_syntax})"  # why the syntax merge did not do it
        if conflicts:
            for h in res.hunks:
                if h.status is Outcome.FAILED:
                    h.reason = f"merge: {conflicts} conflict(s){note}"
            res.conflict = merged
            res.sides = (ours_before, current, ours_after)
            return res
        hunks = [
            HunkResult(
                h.index,
                Outcome.MERGED,
                h.line,
                h.offset,
                h.fuzz,
                f"three-way merge against {self.base_version}",
            )
            if h.status is Outcome.FAILED
            else h
            for h in res.hunks
        ]
        # the sides stay with the merge: a merge whose code breaks a contract on the
        # release becomes a conflict (checks.guard), recorded in git's index as one
        return FileResult(
            res.path, hunks, merged, res.mode, sides=(ours_before, current, ours_after)
        )

    def _merge_syntax(
        self, res: FileResult, current: bytes, ours_before: bytes, ours_after: bytes
    ) -> FileResult | str:
        """The file merged by syntax, or why not (the line merge's note)."""
        from bakery.bake.synchild import Bounded, merge_bounded
        from bakery.bake.synmerge import SyntaxConflict

        try:  # release content: parsed in a child with a time and memory bound
            merged = merge_bounded(ours_before, ours_after, current)
        except SyntaxConflict as e:
            return f"syntax merge: conflict at {e.where}"
        except Bounded as e:
            return f"syntax merge stopped: {e}; merged by lines"
        joined = ", ".join(merged.joined) or "no shared item"
        hunks = [
            HunkResult(
                h.index,
                Outcome.MERGED_SYNTAX,
                h.line,
                h.offset,
                h.fuzz,
                f"syntax merge against {self.base_version}; joined at {joined}",
            )
            if h.status is Outcome.FAILED
            else h
            for h in res.hunks
        ]
        return FileResult(
            res.path, hunks, merged.content, res.mode, sides=(ours_before, current, ours_after)
        )

    def guard(
        self,
        pairs: list[tuple[Diff, DiffResult]],
        baked: Reader,
        pristine: Reader,
        applied: bool,
    ) -> None:
        """Placement and contract checks of the hunks (checks.guard), after the plan. Only
        with the base release to compare with: the base release's own bake pays nothing,
        not even the import."""
        side = self.side
        if side is None or not self.base_version:
            return
        from bakery.checks import guard
        from bakery.checks.contracts import World

        record = guard.BaseRecord(
            [side.by_name[n] for n in side.order],
            lambda name, rel: side.sides(name, rel)[1],
            side.results,
            World(side.final),
            World(side.read_base),
            self.base_version,
        )
        port = None if self.port is None else str(self.port)
        label = _shown(self.target)
        if label is None:  # a git+ source or a local tree: its name, and commit if any
            where, _, commit = self.target.source.rpartition("@")
            label = f"{Path(where or commit).name}@{commit[:12]}" if where else Path(commit).name
        target = guard.Target(World(baked), World(pristine), label, port, applied)
        guard.check(pairs, target, record)

    def warnings(self, diff: Diff) -> list[str]:
        if self.base is None or self.base_version is None or not self.warn:
            return []
        return drift_warnings(diff, self.base, self.target, self.base_version, _shown(self.target))


def _shown(target: Pristine) -> str | None:
    """The target's name in warnings: its own identity where it is not the release it
    declares (0.30.0+local.<hash>), else its version."""
    ident = target.identity
    if ident is not None and not ident.pristine and ident.label and target.version:
        return ident.label
    return target.version


def make_fallback(
    series: Series,
    target: Pristine,
    ctx: Context,
    *,
    merge: bool = True,
    defer_check: bool = False,
) -> Fallback:
    """The base release takes part when the series names one and the target's files are
    not the base's: another release, or a tree that declares the base but differs from it
    (sources/identity.py), whatever its PKG-INFO says. A local tree is compared with the
    base only if the base is cached already (its identity check caches the release it
    claims): a bake of a local tree never goes to the network for it. --no-merge leaves it
    out. Lines are merged first, then by syntax (synmerge.py): apply, check and port use
    one engine. defer_check: see sources.resolve (the caller confirms and closes
    fallback.base)."""
    port_release = _port_release(series)
    # a port on its own release: the series' base takes part as before, so the contract
    # checks still say what upstream changed and that the port's code fits it
    if port_release is not None and not _is_base(target, port_release):
        return _port_fallback(series, target, ctx, port_release, merge, defer_check)
    cache, base = ctx.cache, None
    if (
        merge
        and series.base
        and not _is_base(target, series.base)
        and (target.sha256 is not None or cache.tree_entry(f"vllm-{series.base}") is not None)
    ):
        base = sources.release(series.base, cache, ctx.progress, defer_check)
    return Fallback(series, target, base, merge, syntax=merge)


def _port_release(series: Series) -> str | None:
    """The release a port in use was made for (its folder's name), if it is one."""
    if series.port is None or not sources.is_version(series.port.name):
        return None
    return series.port.name


def _port_fallback(
    series: Series,
    target: Pristine,
    ctx: Context,
    release: str,
    merge: bool,
    defer_check: bool,
) -> Fallback:
    """A port taken for a tree that is not its release's (a checkout of main after 0.34.0
    takes 0.34.0's port): where a hunk of the port fails, the merge's common ancestor is
    the port's release and "ours" the port on it, as ``bakery port`` merges; never the
    series' base with its own diffs, which would bring back code the port had left."""
    if not merge or _is_base(target, release):
        return Fallback(series, target, None, merge)
    if target.sha256 is None and ctx.cache.tree_entry(f"vllm-{release}") is None:
        return Fallback(series, target, None, merge)
    base = sources.release(release, ctx.cache, ctx.progress, defer_check)
    start = load_series(str(series.path))
    if series.port is not None:
        start = start.with_port(series.port)
    return Fallback(series, target, base, merge, syntax=True, start=start)


def _is_base(target: Pristine, base: str) -> bool:
    """The target is the base release itself: it says so, and where its files were
    compared (a local tree, a git source), they are the base's."""
    if target.version != base:
        return False
    return target.identity is None or target.identity.pristine


# --- why a hunk failed -------------------------------------------------------------------------

ACTIONS = {
    "already-upstream": "drop the hunk (or the diff) from this release's port: upstream has it",
    "moved": "the file moved upstream: make a port whose diff names the new path",
    "context-drift": "resolve the conflict by hand, then refresh a port from the resolved tree",
    "missing": "the file is gone upstream: drop or rewrite the diff in a port",
    "reversed": "the diff's + and - lines are swapped (made as diff -u NEW OLD?): "
    "reverse it (patch -R, or interdiff), then bake again",
    "contract": "the merged code calls what the release no longer defines that way: "
    "resolve it by hand (the attempt's index holds the three sides), then refresh a port",
}


def find_moved(tree: Path, rel: str, content: bytes | None) -> str | None:
    """Where a file went: same name elsewhere with the most similar content. Only regular
    files are read, each bounded (``safety.cachepolicy.read_bytes``): a local ``--vllm``
    tree may hold a FIFO of that name, which an open would wait on for ever, or a link to
    ``/dev/zero``."""
    from bakery.safety import cachepolicy, limits

    name = Path(rel).name
    best: tuple[float, str] | None = None
    text = (content or b"").decode("latin-1")
    for root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d not in (".git", "node_modules", "__pycache__")]
        if name not in files:
            continue
        cand = Path(root) / name
        crel = cand.relative_to(tree).as_posix()
        if crel == rel or cachepolicy.regular(cand) is None:
            continue  # a link, FIFO or device: never a moved source file
        ratio = 1.0
        if text:
            try:
                found = cachepolicy.read_bytes(cand, limits.MAX_TREE_FILE, "file")
            except (BakeryError, OSError):
                continue  # swapped since, or too large
            ratio = difflib.SequenceMatcher(
                None, text, found.decode("latin-1"), autojunk=False
            ).quick_ratio()
        if best is None or ratio > best[0]:
            best = (ratio, crel)
    return best[1] if best and best[0] >= 0.5 else None


def diagnose(
    res: FileResult, fp: FilePatch, target: Pristine, base: Pristine | None, on_base: bool = False
) -> None:
    """Give each failed or already-applied hunk a reason and an action, in place. On the
    series' own base release (``on_base``), a hunk whose result is already in the file is
    not upstream's: the diff is reversed (issue 45), and says so."""
    for h in res.hunks:
        if h.status is Outcome.ALREADY and on_base:
            h.reason = (
                f"reversed: its new side is already in {target.version}, the release the "
                "series' diffs are made on"
            )
            h.action = ACTIONS["reversed"]
        elif h.status is Outcome.ALREADY:
            h.reason = "already upstream (the hunk's result is in the file)"
            h.action = ACTIONS["already-upstream"]
        elif h.status is Outcome.FAILED:
            if not (target.tree / fp.path).exists():
                base_content = None
                if base is not None and (base.tree / fp.path).is_file():
                    base_content = (base.tree / fp.path).read_bytes()
                moved = find_moved(target.tree, fp.path, base_content)
                if moved:
                    h.reason = f"file moved upstream to {moved}"
                    h.action = ACTIONS["moved"]
                else:
                    h.reason = "the file does not exist in this release"
                    h.action = ACTIONS["missing"]
            else:
                merged = f"; {h.reason}" if h.reason and "merge" in h.reason else ""
                h.reason = "context drift" + merged
                h.action = ACTIONS["context-drift"]


# --- drift warnings -------------------------------------------------------------------------------


def _defs(source: bytes) -> dict[str, Definition]:
    from bakery.checks.pyindex import definitions

    try:
        return definitions(ast.parse(source))
    except (SyntaxError, ValueError):
        return {}


def _touched(defs: dict[str, Definition], ranges: list[tuple[int, int]]) -> list[str]:
    from bakery.checks.pyindex import span

    names = []
    for name, node in defs.items():
        start, end = span(node)
        if any(a <= end and start <= b for a, b in ranges):
            names.append(name)
    # the innermost names are the ones that say most; drop a class when a method is named
    return [n for n in names if not any(o != n and o.startswith(n + ".") for o in names)]


def drift_warnings(
    diff: Diff, base: Pristine, target: Pristine, base_version: str, target_version: str | None
) -> list[str]:
    warnings = []
    for fp in diff.files:
        if fp.is_new or not fp.path.endswith(".py"):
            continue
        bpath, tpath = base.tree / fp.path, target.file(fp.path)
        if not bpath.is_file() or not tpath.is_file():
            continue
        bsrc, tsrc = bpath.read_bytes(), tpath.read_bytes()
        if bsrc == tsrc:
            continue
        ranges = [(h.old_start, h.old_start + max(h.old_len, 1) - 1) for h in fp.hunks]
        bdefs, tdefs = _defs(bsrc), _defs(tsrc)
        for name in _touched(bdefs, ranges):
            kind = "class" if isinstance(bdefs[name], ast.ClassDef) else "function"
            if name not in tdefs:
                warnings.append(
                    f"{fp.path}: {kind} {name} is gone upstream "
                    f"({base_version} -> {target_version})"
                )
            elif ast.dump(bdefs[name]) != ast.dump(tdefs[name]):
                warnings.append(
                    f"{fp.path}: upstream changed {kind} {name} between "
                    f"{base_version} and {target_version}; review the patch"
                )
    return warnings
