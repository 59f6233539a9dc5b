"""``bakery upstream``: early warning from vLLM's main branch.

The series is checked against a ``git+URL@REF`` tree (as ``bakery check`` does: hunk
outcomes, placement, contracts), then the upstream history since the last release before
REF is read from the cached mirror, and every commit that touched what the series relies
on is listed with what it touched:

- the lines each hunk patches (followed through history with ``git log -L``), or the
  whole file where a hunk did not apply or the file is gone;
- the definitions of the names the hunks' code uses (their contracts).

So the team hears of a change that breaks (or silently changes) the series before the
release that carries it ships.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.plan import plan
from bakery.checks.contracts import GONE, World
from bakery.checks.guard import LANDED
from bakery.context import Context
from bakery.errors import UsageError
from bakery.git import history
from bakery.logs import muted
from bakery.model import records
from bakery.model.report import BakeReport
from bakery.patch.diffs import Diff
from bakery.sources.pristine import Pristine


@dataclass
class Touch:
    sha: str
    subject: str
    touches: list[str] = field(default_factory=list)


@dataclass
class UpstreamReport:
    check: BakeReport
    source: str
    commit: str
    since: str
    #: What was looked at: "path:a-b (hunk N of DIFF)", "path (...)", "path:a-b (`name`)".
    regions: list[str]
    commits: list[Touch]

    def to_json(self) -> dict[str, object]:
        return {
            "series": self.check.series_name,
            "source": self.source,
            "commit": self.commit,
            "since": self.since,
            "applies": self.check.ok,
            "regions": self.regions,
            "commits": records.plain(self.commits),
            "check": self.check.to_json(),
        }


#: A region of the tree at REF: (path, (first, last line) or None for the whole file, why).
Region = tuple[str, tuple[int, int] | None, str]


#: One landed hunk of an earlier diff: (its first line in that diff's output, lines it
#: wrote, lines it replaced, its first line in that diff's input).
_Edit = tuple[int, int, int, int]


def _back(line: int, edits: list[list[_Edit]]) -> int:
    """line of the file as the later diffs see it, mapped back through the earlier diffs'
    landed hunks (newest first) to the line of the pristine file at REF."""
    for hunks in reversed(edits):
        shift = 0
        for out_start, new_len, old_len, in_start in hunks:
            if line >= out_start + new_len:
                shift += new_len - old_len
            elif line >= out_start:  # inside what the hunk wrote: its own old lines
                line = in_start + min(line - out_start, max(old_len - 1, 0)) + shift
                break
        line -= shift
    return max(line, 1)


def _hunk_regions(diffs: list[Diff], report: BakeReport) -> list[Region]:
    """Each hunk's lines in the pristine tree at REF: where it landed, less the shift of
    the hunks before it in the file, mapped back through the earlier diffs that changed
    the same file (a second diff's line numbers are those after the first); its whole
    file where it did not land."""
    out: list[Region] = []
    history: dict[str, list[list[_Edit]]] = {}
    for d, dres in zip(diffs, report.diffs, strict=False):
        for fp, fres in zip(d.files, dres.files, strict=False):
            path = fp.old_path or fp.path
            earlier = history.setdefault(fp.path, history.pop(path, []))
            if fp.is_new:
                continue
            by = {r.index: r for r in fres.hunks}
            shift = 0
            landed: list[_Edit] = []
            for h in fp.hunks:
                r = by.get(h.index)
                why = f"hunk {h.index} of {d.name}"
                if r is None or r.status not in LANDED:
                    status = r.status.value if r else "failed"
                    out.append((path, None, f"{why} ({status})"))
                    continue
                start = r.line - shift
                end = max(start + h.old_len - 1, start)
                first, last = _back(start, earlier), _back(end, earlier)
                out.append((path, (first, max(last, first)), why))
                landed.append((r.line, h.new_len, h.old_len, start))
                shift += h.new_len - h.old_len
            earlier.append(landed)
    return out


def _contract_regions(report: BakeReport, pristine: Pristine) -> list[Region]:
    """The definitions, at REF, of the names the hunks' code uses."""
    world = World(lambda rel: _read(pristine, rel))
    out: list[Region] = []
    seen: set[tuple[str, str]] = set()
    for d in report.diffs:
        for f in d.files:
            for h in f.hunks:
                for use in h.uses:
                    name = use.split("[", 1)[0].split("(", 1)[0]
                    where = world.locate(f.path, name)
                    if where is None or where is GONE or not isinstance(where, tuple):
                        continue
                    file, local = where
                    idx = world.index(file)
                    span = idx.defs.get(local) if idx is not None else None
                    if span is not None and (file, local) not in seen:
                        seen.add((file, local))
                        out.append((file, span, f"`{name}`, used by hunk {h.index} of {d.name}"))
    return out


def _read(pristine: Pristine, rel: str) -> bytes | None:
    p = pristine.file(rel)
    try:
        return None if p.is_symlink() or not p.is_file() else p.read_bytes()
    except OSError:
        return None


def upstream(
    ctx: Context, series_spec: str, vllm: str, *, since: str | None = None
) -> UpstreamReport:
    from bakery.commands import apply as commands
    from bakery.sources import spec as sources

    if not sources.is_git(vllm):
        raise UsageError(f"--vllm {vllm!r}: upstream reads history: pass git+URL@REF")
    with muted():
        series, pristine = commands._prepare(ctx, series_spec, commands.BakeOptions(vllm=vllm))
    try:
        fallback = commands._fallback(ctx, series, pristine, True)
        try:
            report = plan(series, pristine, fallback=fallback).report
        finally:
            if fallback.base is not None:
                fallback.base.close()
        pristine.confirm()
        url, _, commit = pristine.source.rpartition("@")
        from bakery.sources.gitsource import git_mirror

        mirror = git_mirror(url, ctx.cache)
        tag = _since_tag(mirror, commit, since)
        diffs = series.load_diffs()
        strip, root = report.layout.get("strip", 1), report.layout.get("root", "")
        for d in diffs:
            d.resolve_paths(strip if isinstance(strip, int) else 1, str(root))
        regions = _hunk_regions(diffs, report) + _contract_regions(report, pristine)
        commits = _touching(mirror, tag, commit, regions, pristine)
    finally:
        pristine.close()
    shown = [f"{p}:{a[0]}-{a[1]} ({why})" if a else f"{p} ({why})" for p, a, why in regions]
    return UpstreamReport(report, pristine.source, commit, tag, shown, commits)


def _since_tag(repo: Path, commit: str, since: str | None) -> str:
    if since is None:
        tag = history.last_release(repo, commit)
        if tag is None:
            raise UsageError("no release tag (vX.Y.Z) before the ref: pass --since VERSION")
        return tag
    for name in (f"v{since}", since):
        if history.exists(repo, f"refs/tags/{name}"):
            return name
    raise UsageError(f"--since {since}: no tag v{since} in the repository")


def _touching(
    repo: Path, tag: str, commit: str, regions: list[Region], pristine: Pristine
) -> list[Touch]:
    found: dict[str, Touch] = {}
    for path, lines, why in regions:
        exists = _read(pristine, path) is not None
        where = f"{path}:{lines[0]}-{lines[1]}" if lines and exists else path
        for c in history.touching(repo, tag, commit, path, lines if exists else None):
            t = found.setdefault(c.sha, Touch(c.sha, c.subject))
            label = f"{where} ({why})"
            if label not in t.touches:
                t.touches.append(label)
    order = {c.sha: i for i, c in enumerate(history.touching(repo, tag, commit, "."))}
    return sorted(found.values(), key=lambda t: order.get(t.sha, len(order)))
