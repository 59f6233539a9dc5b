"""The whole series applied in memory against the pristine files it touches, before a single
byte is written: ``check`` and a conflicting ``apply`` never copy the tree."""

from __future__ import annotations

import json
import logging
import stat
from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.merge import Fallback, diagnose
from bakery.bake.staging import display_path
from bakery.errors import UnsafePathError
from bakery.model.report import BakeReport, DiffResult, bake_proof
from bakery.patch.diffs import Diff, FilePatch
from bakery.patch.engine import FileResult, Outcome, apply_file
from bakery.patch.series import Series, detect_layout
from bakery.sources.pristine import Pristine

_log = logging.getLogger(__name__)


@dataclass
class Plan:
    """The in-memory result of applying the series."""

    report: BakeReport
    #: Per diff, the files it writes: path -> (content or None to delete, mode).
    writes: list[dict[str, tuple[bytes | None, int | None]]] = field(default_factory=list)


class _PlannedFiles(dict[str, tuple[bytes | None, int | None]]):
    """Path -> (content or None when deleted, mode), counting the files each folder holds."""

    def __init__(self) -> None:
        super().__init__()
        self.filled: dict[str, int] = {}

    def __setitem__(self, rel: str, value: tuple[bytes | None, int | None]) -> None:
        old = self.get(rel)
        was, now = old is not None and old[0] is not None, value[0] is not None
        if was != now:
            parts = rel.split("/")
            for i in range(1, len(parts)):
                folder = "/".join(parts[:i])
                self.filled[folder] = self.filled.get(folder, 0) + (1 if now else -1)
        super().__setitem__(rel, value)


class _Overlay:
    """The tree as the series has changed it so far: pristine files plus changes."""

    def __init__(self, pristine: Pristine) -> None:
        self.pristine = pristine
        self.state = _PlannedFiles()

    def read(self, diff: Diff, fp: FilePatch, rel: str) -> tuple[bytes | None, int | None]:
        if rel in self.state:
            return self.state[rel]
        self._check_nesting(diff, fp, rel)
        try:
            path = _checked_path(self.pristine, diff, fp, rel)
        except NotADirectoryError:
            return self._under_file(diff, fp, rel)
        try:
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePathError(diff.path, fp.diff_line, f"{rel} is not a regular file")
            return path.read_bytes(), stat.S_IMODE(st.st_mode)
        except FileNotFoundError:
            return None, None
        except NotADirectoryError:
            return self._under_file(diff, fp, rel)
        except OSError as e:
            raise UnsafePathError(
                diff.path, fp.diff_line, f"cannot read {rel}: {e.strerror}"
            ) from None

    def exists(self, rel: str) -> bool:
        """Whether the file is there as the series has left the tree so far (a plain
        diff whose two names differ patches the one that exists: patch.parse)."""
        if rel in self.state:
            return self.state[rel][0] is not None
        try:
            path = self.pristine.file(rel)
            return path.is_file() and not path.is_symlink()
        except OSError:
            return False

    def _under_file(self, diff: Diff, fp: FilePatch, rel: str) -> tuple[None, None]:
        """A path below a pristine file: absent where the series deleted that file (a
        file turned into a folder, as git applies it), else refused naming the file."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            above = "/".join(parts[:i])
            if above in self.state and self.state[above][0] is None:
                return None, None
            if self.pristine.file(above).is_file():
                raise UnsafePathError(
                    diff.path, fp.diff_line, f"{rel}: {above} is a file, not a folder"
                )
        raise UnsafePathError(diff.path, fp.diff_line, f"cannot read {rel}: not a folder above it")

    def final(self, rel: str) -> bytes | None:
        """A file with the whole series applied (for checks.guard)."""
        return self.state[rel][0] if rel in self.state else self.pristine_file(rel)

    def pristine_file(self, rel: str) -> bytes | None:
        """A pristine file, or None (never read through a link: checks.guard only)."""
        path = self.pristine.file(rel)
        try:
            return None if path.is_symlink() or not path.is_file() else path.read_bytes()
        except OSError:
            return None

    def _check_nesting(self, diff: Diff, fp: FilePatch, rel: str) -> None:
        """Refuse a file inside a file the series created, or over a folder it filled."""
        parts = rel.split("/")
        for i in range(1, len(parts)):
            above = self.state.get("/".join(parts[:i]))
            if above is not None and above[0] is not None:
                raise UnsafePathError(
                    diff.path, fp.diff_line, f"{rel}: {'/'.join(parts[:i])} is a file, not a folder"
                )
        if self.state.filled.get(rel, 0) > 0:
            raise UnsafePathError(
                diff.path, fp.diff_line, f"{rel}: is a folder (the series created files in it)"
            )


def _checked_path(pristine: Pristine, diff: Diff, fp: FilePatch, rel: str) -> Path:
    """The file's path in the pristine tree, refusing any symlink on the way (as GNU patch
    and git apply do since their CVE fixes: a link could point outside the tree)."""
    full = pristine.file(rel)
    base = pristine.package_dir if pristine.package_dir is not None else pristine.tree
    parts = full.relative_to(base).parts
    cur = base
    for part in parts:
        cur = cur / part
        try:
            st = cur.lstat()
        except FileNotFoundError:
            break
        except NotADirectoryError:
            raise  # a file used as a folder: _Overlay.read says which
        except OSError as e:  # a name too long, a loop
            raise UnsafePathError(
                diff.path, fp.diff_line, f"cannot read {rel}: {e.strerror}"
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(
                diff.path,
                fp.diff_line,
                f"{rel}: refusing to write through the symlink {cur.relative_to(base)}",
            )
    return full


class _DiffStart:
    """What one diff found, for its git renames and copies: git reads their sources as the
    diff found the tree (a criss-cross rename swaps two files), lets a rename's target be a
    file that the diff renames or deletes away, and never deletes a source that another
    rename or copy of the diff wrote."""

    def __init__(self, d: Diff) -> None:
        self.before: dict[str, tuple[bytes | None, int | None]] = {}
        self.made: set[str] = set()
        self.leaving = {fp.old_path for fp in d.files if fp.move == "rename" or fp.is_delete}
        #: renamed away by this diff (and not written again since)
        self.renamed: set[str] = set()

    def read(self, d: Diff, fp: FilePatch, overlay: _Overlay) -> tuple[bytes | None, int | None]:
        if fp.move is None:
            if fp.path in self.renamed and not fp.is_new:
                raise UnsafePathError(
                    d.path,
                    fp.diff_line,
                    f"{fp.path} was renamed away earlier in this diff (git refuses it: patch "
                    "the new name)",
                )
            return overlay.read(d, fp, fp.path)
        if fp.path not in self.leaving and overlay.read(d, fp, fp.path)[0] is not None:
            raise UnsafePathError(
                d.path,
                fp.diff_line,
                f"the {fp.move} of {fp.source} to {fp.path}: {fp.path} already exists "
                "(git refuses it)",
            )
        src = fp.source
        return self.before[src] if src in self.before else overlay.read(d, fp, src)

    def write(
        self,
        overlay: _Overlay,
        writes: dict[str, tuple[bytes | None, int | None]],
        rel: str,
        value: tuple[bytes | None, int | None],
        pre: tuple[bytes | None, int | None],
    ) -> None:
        """Write rel as the diff changes it; pre: what it held before."""
        if value[0] is None and rel in self.made:
            return  # a rename's source that another file patch of this diff wrote
        self.before.setdefault(rel, pre)
        if value[0] is not None:
            self.renamed.discard(rel)
        writes[rel] = value
        overlay.state[rel] = value


def _plan_file(
    d: Diff,
    fp: FilePatch,
    overlay: _Overlay,
    writes: dict[str, tuple[bytes | None, int | None]],
    fuzz: int,
    fallback: Fallback | None,
    pristine: Pristine,
    start: _DiffStart | None = None,
) -> FileResult:
    """One file of one diff, applied on the overlay (merged or diagnosed if it fails)."""
    start = start or _DiffStart(d)
    old, mode = start.read(d, fp, overlay)
    fres = apply_file(fp, old, fuzz, mode)
    if not fres.ok:
        if fallback is not None:
            fres = fallback.resolve(d, fp, old, fres)
        else:
            diagnose(fres, fp, pristine, None)
    # A file with failed hunks carries the hunks that did apply forward, as GNU patch
    # leaves them: later diffs see them, and --keep-failed writes them.
    if fres.content is not None or fres.deleted:
        value = (None if fres.deleted else fres.content, fres.mode)
        if fp.move is not None or fp.is_new:
            start.made.add(fp.path)
        if fp.move is not None:
            start.write(overlay, writes, fp.path, value, overlay.read(d, fp, fp.path))
            if fp.move == "rename" and fp.source not in start.made:
                start.write(overlay, writes, fp.source, (None, None), (old, mode))
                start.renamed.add(fp.source)
        elif (old, mode) != value:
            start.write(overlay, writes, fp.path, value, (old, mode))
    return fres


def _notes(d: Diff, strip: int) -> list[str]:
    """What bakery read differently from the diff's text, as GNU patch does."""
    notes = []
    if d.strip is not None and d.strip != strip:
        notes.append(f"read with strip {d.strip} (its names are not those of the other diffs)")
    stripped = [fp.path for fp in d.files if fp.crlf_stripped]
    if stripped:
        notes.append(
            "a CRLF copy: the trailing CR of its lines was dropped, as GNU patch does "
            f"(`--binary` keeps them): {', '.join(stripped)}"
        )
    for fp in d.files:
        if fp.move is not None:
            verb = "renames" if fp.move == "rename" else "copies"
            notes.append(f"{verb} {fp.source} to {fp.path} (git's '{fp.move} from/to')")
        elif fp.other_path is not None:
            notes.append(
                f"names {fp.other_path} and {fp.path}: patches {fp.path}, as GNU patch "
                "chooses (the name that exists)"
            )
    return notes


#: In a carried port's folder (porting.update.carry writes it): the stale port it was
#: carried from, and why that port was stale.
CARRIED = "CARRIED.json"


def _stale(series: Series) -> list[str]:
    """Why the port is out of step with the series (none without a port); provenance is
    imported only for a port, not on every bake of a release the series fits."""
    if not series.port:
        return []
    from bakery.patch import provenance

    return provenance.stale_lines(series.path, series.port)


def _carried(series: Series) -> tuple[str, list[str]] | None:
    """(the stale port, why it was stale) where the port in use is a carried one."""
    if series.port is None:
        return None
    marker = series.port / CARRIED
    try:
        data = json.loads(marker.read_text(encoding="utf-8")) if marker.is_file() else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("port"), str):
        return None
    stale = data.get("stale")
    return data["port"], [str(x) for x in stale] if isinstance(stale, list) else []


def _contract_conflicts(report: BakeReport) -> None:
    """A merged hunk the contract check failed (checks.guard: its code calls what the
    release no longer defines that way) is a conflict like any other: its action said, the
    merged file written as the conflict of a ``--keep-failed`` attempt, with the merge's
    three sides as unmerged index entries."""
    from bakery.bake.merge import ACTIONS

    for d in report.diffs:
        for f in d.files:
            broken = [
                h
                for h in f.hunks
                if h.status is Outcome.FAILED and (h.reason or "").startswith("contract:")
            ]
            for h in broken:
                h.action = ACTIONS["contract"]
            if broken and f.conflict is None and f.content is not None:
                f.conflict = f.content


def plan(
    series: Series,
    pristine: Pristine,
    *,
    fuzz: int = 0,
    fallback: Fallback | None = None,
) -> Plan:
    """Apply the whole series in memory. Raises DiffError for bad diffs.

    ``fallback`` (merge.Fallback) merges and diagnoses files that do not apply cleanly and
    warns about upstream drift; without it, failed hunks are still diagnosed."""
    diffs = series.load_diffs()
    strip, root, detected = detect_layout(
        series, pristine.tree if pristine.package_dir is None else pristine.tree
    )
    if pristine.package_dir is not None and root == "":
        root = "vllm"
    for d in diffs:
        d.resolve_paths(strip, root)
    report = BakeReport(
        series.name,
        display_path(series.path),
        version=pristine.version,
        source=pristine.source,
        sha256=pristine.sha256,
        commit=pristine.commit,
        identity=pristine.identity,
        port=display_path(series.port) if series.port else None,
        port_stale=_stale(series),
        layout={"strip": strip, "root": root, "detected": detected},
    )
    carried = _carried(series)
    if carried is not None:  # the stale port is what the bake stands for; it says so
        report.port, report.port_stale = carried
        report.carried = (
            f"the series' change carried onto the stale port {carried[0]} (as `bakery port "
            f"{series.name} --update` carries it)"
        )
    if detected:
        _log.info(
            f"strip {strip}, root {root or '.'!r} (no series.toml setting)",
            extra={"event": "detected"},
        )
    overlay = _Overlay(pristine)
    result = Plan(report)
    for i, d in enumerate(diffs, 1):
        _log.info(f"Applying {d.name} ({i}/{len(diffs)})", extra={"event": "diff"})
        d.resolve_paths(strip, root, overlay.exists)  # x.orig/x: the file the tree has now
        dres = DiffResult(d.name, d.sha256, notes=_notes(d, strip))
        writes: dict[str, tuple[bytes | None, int | None]] = {}
        start = _DiffStart(d)
        for fp in d.files:
            dres.files.append(_plan_file(d, fp, overlay, writes, fuzz, fallback, pristine, start))
        if fallback is not None and dres.ok:
            dres.warnings = fallback.warnings(d)
        report.diffs.append(dres)
        result.writes.append(writes)
    if fallback is not None:
        fallback.guard(
            list(zip(diffs, report.diffs, strict=True)),
            overlay.final,
            overlay.pristine_file,
            report.ok,
        )
        _contract_conflicts(report)
    report.status = "checked" if report.ok else "conflict"
    report.proof = bake_proof(report)
    return result
