"""Ports proposed without a human: every start tried, merged by lines then by syntax,
ranked, and proven by verify before anything is written.

A *start* is a set of diffs and the release they were made against: the series' own
diffs on its base release, and each committed port on its own release. For a target
release, each start is planned against the target with the three-way fallback merging
against the start's release ("ours" is the start's diffs baked there), first by lines
(``git merge-file``) and, where lines conflict in a Python file, by syntax
(:mod:`bakery.bake.synmerge`). The candidates are ranked: fewest failed hunks first, then
the smallest difference from the nearest older port (the port a human would have
started from). Only a candidate that verify passes, and whose kernels give the previous
release's outputs on recorded inputs except where the series explains the difference
(:mod:`bakery.porting.differential`), becomes ``patches/SERIES/X/``.
"""

from __future__ import annotations

import difflib
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bakery.bake.merge import Fallback
from bakery.bake.plan import Plan, plan
from bakery.context import Context
from bakery.logs import muted
from bakery.patch import provenance as records
from bakery.patch.engine import Outcome
from bakery.patch.series import Series, load_series
from bakery.porting.writer import port_texts
from bakery.sources.pristine import Pristine
from bakery.sources.resolve import release

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Start:
    """Diffs and the release they apply to exactly."""

    label: str  # "series" or "port 0.33.0"
    release: str
    port: Path | None  # None: the series' own diffs


@dataclass
class Candidate:
    start: Start
    #: The start's diffs as planned on the target (their paths resolved by the plan).
    series: Series
    plan: Plan
    #: Hunks by outcome ("applied", "offset", "merged", "merged-syntax", "failed", ...).
    kinds: dict[str, int]
    #: Per diff, the text the port would hold (only when nothing failed).
    texts: list[bytes] = field(default_factory=list)
    #: Lines that differ from the nearest older port's (or the series') diffs.
    distance: int = 0

    @property
    def failed(self) -> int:
        return self.kinds.get(Outcome.FAILED.value, 0) + self.kinds.get(Outcome.ALREADY.value, 0)

    def rank(self) -> tuple[int, int]:
        return (self.failed, self.distance)

    def to_json(self) -> dict[str, object]:
        return {
            "start": self.start.label,
            "release": self.start.release,
            "hunks": dict(self.kinds),
            "distance": self.distance,
            "conflicts": self.failed,
        }


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def starts(series: Series, home: Path, target: str) -> list[Start]:
    """The series' own diffs on its base release, then each committed port on its own
    release (oldest first); never the target's own port, and never a port out of step
    with the series (or with no record of what it was made from: it may lack a fix)."""
    out = [Start("series", series.base, None)] if series.base else []
    root = home / "patches" / series.name
    ports = [
        p
        for p in (root.iterdir() if root.is_dir() else [])
        if p.is_dir() and _version(p.name) is not None and p.name != target
    ]
    for p in sorted(ports, key=lambda p: _version(p.name) or Version("0")):
        stale = records.stale_lines(series.path, p)
        if stale:
            _log.info(f"not starting from port {p.name}: {stale[0]}", extra={"event": "detected"})
            continue
        out.append(Start(f"port {p.name}", p.name, p))
    return out


def _series_for(spec: str, start: Start, home: Path) -> Series:
    s = load_series(spec, home)
    if start.port is not None:
        s = s.with_port(start.port)
    return s


def _previous(series: Series, home: Path, target: str) -> list[bytes]:
    """The diffs a porter starts from: the nearest older committed port's, else the
    series' own."""
    tv = _version(target)
    root = home / "patches" / series.name
    older = [
        p
        for p in (root.iterdir() if root.is_dir() else [])
        if p.is_dir() and (v := _version(p.name)) is not None and tv is not None and v < tv
    ]
    s = load_series(str(series.path), home)
    if older:
        s = s.with_port(max(older, key=lambda p: _version(p.name) or Version("0")))
    return [d.path.read_bytes() for d in s.load_diffs()]


def _distance(a: list[bytes], b: list[bytes]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        sm = difflib.SequenceMatcher(None, x.splitlines(), y.splitlines(), autojunk=False)
        n += sum(
            max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"
        )
    return n


def candidates(
    ctx: Context, spec: str, target: Pristine, *, syntax: bool = True
) -> list[Candidate]:
    """Every start planned against the target, ranked best first."""
    home = ctx.home
    base_series = load_series(spec, home)
    version = target.version or ""
    previous = _previous(base_series, home, version)
    found = []
    for st in starts(base_series, home, version):
        _log.info(f"Trying {st.label} (merge base {st.release})", extra={"event": "port"})
        s = _series_for(spec, st, home)
        start_release = release(st.release, ctx.cache)
        fallback = Fallback(
            s, target, start_release, True, syntax=syntax, start=_series_for(spec, st, home)
        )
        with muted():
            pl = plan(s, target, fallback=fallback)
        kinds: dict[str, int] = {}
        for d in pl.report.diffs:
            for f in d.files:
                for h in f.hunks:
                    kinds[h.status.value] = kinds.get(h.status.value, 0) + 1
        cand = Candidate(st, s, pl, kinds)
        if pl.report.ok:
            cand.texts = port_texts(s, pl, target, home)
            cand.distance = _distance(cand.texts, previous)
        found.append(cand)
    return sorted(found, key=Candidate.rank)


def write_port(
    dest: Path,
    series: Series,
    texts: list[bytes],
    note: str,
    record: records.Record | None = None,
) -> None:
    """patches/SERIES/X/ with the proposal's diffs (same names as the series') and its
    provenance note and record (FROM.toml), replaced as a whole."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.bakery-", dir=dest.parent))
    try:
        for d, text in zip(load_series(str(series.path)).load_diffs(), texts, strict=True):
            (staging / d.name).write_bytes(text)
        (staging / "PROVENANCE.md").write_text(note)
        records.write(staging, record or records.of_series(series.path, "port"))
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def provenance(
    cand: Candidate,
    target: str,
    verify_line: str,
    diff_lines: list[str] | None,
    why_not: str = "no earlier release to compare with",
) -> str:
    """The note written beside a proposed port: start, how each hunk was resolved, verify,
    and the differential check: its differences, "no difference", or, where it did not run
    (``diff_lines`` None), "differential: not run" and why."""
    rows = []
    for d in cand.plan.report.diffs:
        for f in d.files:
            for h in f.hunks:
                why = f" ({h.reason})" if h.reason else ""
                rows.append(f"| {d.name} | {f.path} | {h.index} | {h.status.value}{why} |")
    parts = [
        f"# Port of this series to vLLM {target}, proposed by `bakery port`",
        "",
        f"- start: {cand.start.label} (merge base vLLM {cand.start.release})",
        f"- hunks: {', '.join(f'{n} {k}' for k, n in sorted(cand.kinds.items()))}",
        f"- difference from the previous port: {cand.distance} lines",
        f"- verify: {verify_line}",
        *(
            [f"- differential: not run ({why_not})"]
            if diff_lines is None
            else [
                "- differential check against the previous release's baked tree:",
                *[f"  - {line}" for line in diff_lines or ["no difference"]],
            ]
        ),
        "",
        "| diff | file | hunk | resolved by |",
        "| --- | --- | ---: | --- |",
        *rows,
        "",
        "Review it as a human-written port: a syntax merge keeps both sides' changes, and",
        "verify proved the result, but it cannot know what the series meant where upstream",
        "rewrote the code it touches.",
        "",
    ]
    return "\n".join(parts)
