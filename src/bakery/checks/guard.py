"""Checks of hunks that *applied*: did they land in the right definition, and did what
their code uses change upstream? (Issue 19: a clean apply is not yet a right one.)

Placement (Python files): the definitions that enclose a hunk's changed lines on the
series' base release (``Class.method``, ``function`` or ``<module>``) must be the ones that
enclose them where the hunk lands on the target. Otherwise the hunk gets ``moved_def``
and its diff a ``moved-def`` warning naming both: GNU patch's search (nearest match) can
take an identical block in another function when upstream moved code.

Contracts (contracts.py): the vLLM names each hunk of the series' own diffs uses, recorded
on the base release with the series applied. On another release, a name whose upstream
definition disappeared or changed signature (base release against target, both pristine,
so that what the series itself adds is not mistaken for upstream's) is reported, whether or
not the hunk applied, with what the change does to the hunk's call where the series
applies. Under a port, a change is marked resolved when the port's own calls of the name
bind to it.

Both run once, after the whole series is planned, on the files in memory; each Python file
is parsed once per side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bakery.checks import contracts
from bakery.checks.contracts import GONE, Use, World
from bakery.checks.pyindex import PyIndex, Signature, index
from bakery.model.report import DiffResult
from bakery.model.results import Moved
from bakery.patch.diffs import Diff, FilePatch, Hunk
from bakery.patch.engine import HunkResult, Outcome

#: Outcomes whose place in the target is known (the engine found the hunk there).
LANDED = (Outcome.APPLIED, Outcome.OFFSET, Outcome.FUZZ, Outcome.AMBIGUOUS)


@dataclass
class BaseRecord:
    """The series' own diffs on their base release."""

    diffs: list[Diff]
    #: (diff name, path) -> the file after that diff, on the base release.
    after: Callable[[str, str], bytes | None]
    #: (diff name, path) -> the hunks' results there (filled by ``after``).
    results: dict[tuple[str, str], list[HunkResult]]
    baked: World  # the base release with the whole series applied
    pristine: World  # the base release itself
    version: str


@dataclass
class Target:
    baked: World  # the target with the whole series (or port) applied
    pristine: World
    version: str | None
    port: str | None  # the port in use, if any
    applied: bool  # every hunk applied: the baked world is whole


def _changed(h: Hunk, first: int) -> list[int]:
    """The 1-based lines, in the file after the hunk, that stand for its change: its added
    lines; for a hunk that only removes, the line just before the removal."""
    out, k = [], 0
    for kind, _ in h.lines:
        if kind == "+":
            out.append(first + k)
        if kind != "-":
            k += 1
    if out:
        return out
    k = 0
    for kind, _ in h.lines:
        if kind == "-":
            break
        k += 1
    return [max(first + k - 1, 1)]


def _first(h: Hunk, res: HunkResult) -> int:
    """The 1-based line where the hunk's new side starts in the file after it."""
    return res.line if h.new_len else res.line - 1


def _package(rel: str) -> str:
    return rel[: -len(".py")].replace("/", ".").rpartition(".")[0]


def _names(idx: PyIndex, lines: list[int]) -> str:
    out: list[str] = []
    for ln in lines:
        name = idx.enclosing(ln)
        if name not in out:
            out.append(name)
    return ", ".join(out)


def _py(fp: FilePatch) -> bool:
    return fp.path.endswith(".py") and not fp.is_delete


def check(pairs: list[tuple[Diff, DiffResult]], target: Target, record: BaseRecord | None) -> None:
    """Set hunks' ``moved_def`` and ``uses`` and add warnings to their diffs, in place.
    Without ``record`` (the base release itself, --no-merge) there is nothing to compare
    with, and nothing is done: the base bake pays nothing for the checks."""
    if record is None:
        return
    if target.port is None:
        for d, dres in pairs:
            _place_diff(d, dres, record, target.version)
    _contracts(pairs, target, record)


def _upstream(w: World, rel: str, name: str) -> Signature | None:
    sig = w.lookup(rel, name)
    return sig if isinstance(sig, Signature) else None


# --- placement --------------------------------------------------------------------------------


def _place_diff(d: Diff, dres: DiffResult, record: BaseRecord, version: str | None) -> None:
    for fp, fres in zip(d.files, dres.files, strict=False):
        if not _py(fp) or fres.content is None:
            continue
        if any(r.status is Outcome.MERGED for r in fres.hunks):
            continue  # the merge wrote the file: the engine's lines no longer hold
        after = record.after(d.name, fp.path)
        base_results = record.results.get((d.name, fp.path))
        if after is None or base_results is None:
            continue
        b_idx, t_idx = index(after), index(fres.content)
        if b_idx.tree is None or t_idx.tree is None:
            continue
        base_by = {r.index: r for r in base_results}
        now_by = {r.index: r for r in fres.hunks}
        for h in fp.hunks:
            r, b = now_by.get(h.index), base_by.get(h.index)
            if r is None or b is None or r.status not in LANDED:
                continue
            was = _names(b_idx, _changed(h, _first(h, b)))
            now = _names(t_idx, _changed(h, _first(h, r)))
            if was != now:
                r.moved_def = Moved(was, now)
                dres.warnings.append(
                    f"moved-def: {fp.path}: hunk {h.index} changes {was} on "
                    f"{record.version} but lands in {now} on {version} (line {r.line})"
                )


# --- contracts --------------------------------------------------------------------------------


def _recorded(record: BaseRecord) -> list[tuple[str, str, int, Use]]:
    """(diff, path, hunk, use) for every upstream name the series' own hunks use."""
    out = []
    for d in record.diffs:
        for fp in d.files:
            if not _py(fp):
                continue
            after = record.after(d.name, fp.path)
            results = record.results.get((d.name, fp.path))
            if after is None or results is None:
                continue
            idx = index(after, _package(fp.path))
            by = {r.index: r for r in results}
            for h in fp.hunks:
                r = by.get(h.index)
                if r is None:
                    continue
                for use in contracts.uses(idx, set(_changed(h, _first(h, r)))):
                    if _upstream(record.pristine, fp.path, use.name):
                        out.append((d.name, fp.path, h.index, use))
    return out


def _port_uses(pairs: list[tuple[Diff, DiffResult]]) -> dict[tuple[str, str], list[Use]]:
    """(path, name) -> the port's calls of it, where its hunks landed."""
    out: dict[tuple[str, str], list[Use]] = {}
    for d, dres in pairs:
        for fp, fres in zip(d.files, dres.files, strict=False):
            if not _py(fp) or fres.content is None:
                continue
            idx = index(fres.content, _package(fp.path))
            by = {r.index: r for r in fres.hunks}
            for h in fp.hunks:
                r = by.get(h.index)
                if r is not None and r.status in LANDED:
                    for u in contracts.uses(idx, set(_changed(h, _first(h, r)))):
                        out.setdefault((fp.path, u.name), []).append(u)
    return out


def _contracts(pairs: list[tuple[Diff, DiffResult]], target: Target, record: BaseRecord) -> None:
    by_name = {d.name: dres for d, dres in pairs}
    port_uses = _port_uses(pairs) if target.port is not None else {}
    seen: set[tuple[str, str, str]] = set()
    for diff_name, path, hunk, use in _recorded(record):
        dres = by_name.get(diff_name)
        if dres is None:
            continue
        if target.port is None:
            for f in dres.files:
                for r in f.hunks:
                    if f.path == path and r.index == hunk and use.show() not in r.uses:
                        r.uses = sorted([*r.uses, use.show()])
            _break_merged(dres, path, hunk, use, record, target)
        line = _contract_line(path, use, record, target, port_uses)
        if line is None or (path, use.name, line) in seen:
            continue
        seen.add((path, use.name, line))
        dres.warnings.append(f"{line} (hunk {hunk} uses {use.show()})")


MERGES = (Outcome.MERGED, Outcome.MERGED_SYNTAX)


def _break_merged(
    dres: DiffResult, path: str, hunk: int, use: Use, record: BaseRecord, target: Target
) -> None:
    """A merged hunk whose call, present as the series wrote it in the merged file, no longer
    fits what the merged file defines (or uses a name that is gone) is failed: a conflict,
    with the reason, not a bake (issue 45). The bake then stops at it as at any conflict."""
    for f in dres.files:
        if f.path != path or f.content is None:
            continue
        for r in f.hunks:
            if r.index != hunk or r.status not in MERGES:
                continue
            idx = index(f.content, _package(path))
            n = f.content.count(b"\n") + 1
            if use not in contracts.uses(idx, set(range(1, n + 1))):
                continue  # the merge changed the call: nothing to say for sure
            why = contracts.breaks(
                use, record.baked.lookup(path, use.name), target.baked.lookup(path, use.name)
            )
            if why is not None:
                kind = "syntax merge" if r.status is Outcome.MERGED_SYNTAX else "three-way merge"
                r.status = Outcome.FAILED
                r.reason = f"contract: the {kind}'s code does not fit the release: {why}"


def _contract_line(
    path: str,
    use: Use,
    record: BaseRecord,
    target: Target,
    port_uses: dict[tuple[str, str], list[Use]],
) -> str | None:
    old = record.pristine.lookup(path, use.name)
    new = target.pristine.lookup(path, use.name)
    if not isinstance(old, Signature) or old == new:
        return None
    versions = f"{record.version} -> {target.version}"
    if new is None or new is GONE:
        what = f"`{use.name}` ({old.kind}) is gone upstream ({versions})"
    else:
        assert isinstance(new, Signature)
        what = f"upstream changed `{use.name}` ({versions}): {old.show()} -> {new.show()}"
    effect = ""
    baked = target.baked.lookup(path, use.name)
    if target.port is not None:
        calls = port_uses.get((path, use.name), [])
        binds = isinstance(baked, Signature) and all(not contracts.binding(u, baked) for u in calls)
        if binds:
            return f"contract: {path}: {what}; resolved by the port (its code fits)"
        effect = "; the port's code does not fit it either"
    elif target.applied and isinstance(baked, Signature):
        base = record.baked.lookup(path, use.name)
        if isinstance(base, Signature):
            problems = contracts.change(use, base, baked)
            if problems:
                effect = f"; the hunk {'; '.join(problems)}"
    return f"contract: {path}: {what}{effect}"
