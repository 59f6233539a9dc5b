"""Ports for what is not released yet: ``bakery port SERIES --vllm PATH|git+URL@REF`` and
``bakery port SERIES --promote VERSION``.

A tree that is no pristine release (sources/identity.py: a checkout of main, a dev tree)
gets its port proposed and proven as a release's is (commands/port.py: every start, merged
by lines then syntax, baked from the port's own diffs, verified), and written only when
proven, to ``patches/SERIES/next/``: never under a release's name, since it was proven on
another tree. Beside its diffs and PROVENANCE.md, ``PROVEN-ON.json`` records the tree it
was proven on: its identity, upstream commit, source, and the git blob id of every file of
its ``vllm/`` package.

At the release, ``--promote VERSION`` compares the release's files with that record. Equal
(the release is the commit the port was proven on): ``next/`` becomes
``patches/SERIES/VERSION/`` as it is. Not equal: the port is baked from its own diffs on
the release and verified again; only a port proven on the release itself moves, its
provenance saying so. Nothing is written otherwise.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from bakery.bake.staging import display_path
from bakery.bake.tree import bake
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.logs import muted
from bakery.model.identity import Identity
from bakery.outputs import replace_bytes
from bakery.patch.series import Series, load_series
from bakery.porting.proving import (
    PortResult,
    attention,
    clear_scratch,
    leave_best,
    prove,
    verify_line,
)
from bakery.porting.refresh import MADE_ON
from bakery.porting.update import regular_port
from bakery.safety import paths
from bakery.sources import identity as identities
from bakery.sources import resolve as sources
from bakery.sources.pristine import Pristine

_log = logging.getLogger(__name__)

#: The folder a port of an unreleased tree is written to.
NEXT = "next"
PROVEN_ON = "PROVEN-ON.json"


def next_dir(series: Series, home: Path) -> Path:
    return home / "patches" / series.name / NEXT


def package_listing(listing: identities.Listing) -> dict[str, str]:
    """The blob ids of the package's files (what runs), sdist-only files left out."""
    return {
        rel: sha
        for rel, (_, sha) in sorted(listing.items())
        if rel.startswith("vllm/") and not identities.sdist_only(rel)
    }


def _listing(target: Pristine) -> identities.Listing:
    if target.repo:
        return identities.committed_listing(target.tree)
    return identities.worktree_listing(target.tree)


def port_next(
    ctx: Context,
    series_spec: str,
    *,
    vllm: str,
    out_root: Path,
    interpret: bool,
    write: bool,
    syntax: bool,
    upstream: Path | None = None,
) -> PortResult:
    """The port of a tree that is no release, to patches/SERIES/next/ (a PortResult).
    Where no candidate is proven, the best attempt is left as ``bakery port`` leaves it
    for a release (its conflicts unmerged in git's index, as ``apply --keep-failed``), and
    ``upstream`` names the commits behind each hunk a person must look at (issue 45)."""
    from bakery.porting.propose import candidates, provenance, write_port

    home, cache = ctx.home, ctx.cache
    series = load_series(series_spec, home)
    target = sources.resolve(vllm, cache)
    ident = identities.identify(target, cache)
    target.identity = ident
    if ident.pristine:
        raise UsageError(
            f"--vllm {vllm}: the pristine release {ident.label}: "
            f"run bakery port {series.name} --vllm {ident.label}"
        )
    if not (series.path / "tests").is_dir():
        raise UsageError(f"{series.path}: no tests/ folder: a port cannot be proven")
    label = ident.label or NEXT
    result = PortResult(
        series.name,
        label,
        candidates(ctx, series_spec, target, syntax=syntax),
    )
    scratch = (out_root / f"{series.name}-{NEXT}").absolute()
    clear_scratch(scratch)  # an attempt the user edited is never removed
    for n, cand in enumerate(c for c in result.candidates if c.failed == 0):
        tried = prove(series, cand, target, scratch / f"candidate-{n + 1}", interpret)
        result.tried.append(tried)
        if not tried.verify.startswith("passed"):
            continue
        tried.accepted = True
        dest = next_dir(series, home)
        if write:
            why = "a tree that is no release: no release before it to compare with"
            note = provenance(cand, label, tried.verify, None, why)
            note += _proven_on_lines(ident, target)
            write_port(dest, series, cand.texts, note)
            _write_record(dest, ident, target)
        result.written, result.dry_run = display_path(dest), not write
        result.hunks = attention(cand, target.commit or label, upstream)
        return result
    leave_best(ctx, series_spec, result, target, scratch, syntax=syntax)
    if result.candidates:
        result.hunks = attention(result.candidates[0], target.commit or label, upstream)
    return result


def _proven_on_lines(ident: Identity, target: Pristine) -> str:
    return "\n".join(
        [
            "## Proven on",
            "",
            f"- tree: vLLM {ident.label} (declares {ident.claims or 'no version'})",
            f"- source: {target.source}",
            f"- upstream commit: {target.commit or 'none (a local tree)'}",
            f"- tree sha256: {ident.tree_sha256}",
            f"- `bakery port {NEXT}` wrote it to {NEXT}/: at the release, "
            "`bakery port SERIES --promote VERSION` moves it",
            "",
        ]
    )


def _write_record(dest: Path, ident: Identity, target: Pristine) -> None:
    record = {
        "identity": ident.label,
        "claims": ident.claims,
        "commit": target.commit,
        "source": target.source,
        "tree_sha256": ident.tree_sha256,
        "package": package_listing(_listing(target)),
    }
    (dest / PROVEN_ON).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")


@dataclass
class Promoted:
    series: str
    version: str
    #: "same files" (moved as it is) or "re-proven" (baked and verified on the release)
    how: str | None
    port: str | None
    verify: str | None = None
    differs: tuple[str, ...] = ()
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.port is not None

    def to_json(self) -> dict[str, object]:
        return {
            "series": self.series,
            "vllm": self.version,
            "ok": self.ok,
            "how": self.how,
            "port": self.port,
            "verify": self.verify,
            "differs": list(self.differs),
            "note": self.note,
        }


def _read_record(nxt: Path) -> dict[str, object]:
    try:
        record = json.loads((nxt / PROVEN_ON).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"{nxt / PROVEN_ON}: not a record of bakery port ({e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("package"), dict):
        raise UsageError(f"{nxt / PROVEN_ON}: not a record of bakery port")
    return record


def promote(
    ctx: Context,
    series_spec: str,
    version: str,
    *,
    interpret: bool = True,
    out_root: Path | None = None,
) -> Promoted:
    """next/ to the release's own port: as it is where the release's package files are the
    ones it was proven on, else only once baked and verified on the release."""
    home = ctx.home
    series = load_series(series_spec, home)
    if not sources.is_version(version):
        raise UsageError(f"--promote {version!r}: not a release version")
    out_root = out_root if out_root is not None else home / "build" / "port"
    nxt = next_dir(series, home)
    if not (nxt / PROVEN_ON).is_file() and not (nxt / MADE_ON).is_file():
        raise UsageError(f"{display_path(nxt)}: no port of an unreleased tree to promote")
    regular_port(nxt, home)  # PROVENANCE.md is written: never through a link
    dest = home / "patches" / series.name / version
    if dest.exists():
        raise UsageError(f"{display_path(dest)} exists: a release's port is never replaced")
    record = _read_record(nxt) if (nxt / PROVEN_ON).is_file() else None
    release = sources.release(version, ctx.cache)
    try:
        have = package_listing(identities.committed_listing(release.tree))
        proven = record["package"] if record is not None else {}
        assert isinstance(proven, dict)
        differs = tuple(sorted(k for k in set(have) | set(proven) if have.get(k) != proven.get(k)))
        # PROVEN-ON.json is series data, never proof: the port is baked and verified on
        # the release itself, whatever the record says (issue 45)
        line = _reprove(series, nxt, release, out_root, interpret)
    finally:
        release.close()
    if line.startswith("passed") and not differs:
        note = f"- promoted to {version}: its package files are the ones proven on, and it "
        _move(nxt, dest, f"{note}proves on the release (verify {line})\n")
        return Promoted(series.name, version, "same files", display_path(dest), line)
    if not line.startswith("passed"):
        return Promoted(
            series.name,
            version,
            None,
            None,
            line,
            differs[:20],
            f"{len(differs)} file(s) differ from the tree it was proven on, and it does not "
            "prove on the release: run bakery port for the release",
        )
    _move(nxt, dest, f"- promoted to {version}: re-proven on it (verify {line})\n")
    return Promoted(series.name, version, "re-proven", display_path(dest), line, differs[:20])


def _reprove(
    series: Series,
    nxt: Path,
    release: Pristine,
    out_root: Path,
    interpret: bool,
) -> str:
    from bakery.verifying import plan as plans
    from bakery.verifying.runner import run_verify

    _log.info(f"Proving {display_path(nxt)} on vLLM {release.version}", extra={"event": "port"})
    folder = (out_root / f"{series.name}-promote-{release.version}").absolute()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    s = load_series(str(series.path))
    s = s.with_port(nxt)
    with muted():
        report = bake(s, release, folder / "tree")
    if report.status != "baked":
        return "not run: the port does not bake on the release as written"
    try:
        options = plans.VerifyOptions(interpret=interpret, log=folder / "verify.log")
        res = run_verify(plans.for_series(series, folder / "tree", options))
    except BakeryError as e:
        return f"not run: {e.message}"
    return verify_line(res.exit_code, res.passed, res.failed, res.skipped)


def _move(nxt: Path, dest: Path, line: str) -> None:
    note = nxt / "PROVENANCE.md"
    if os.path.lexists(note):
        paths.regular_file(note, "--promote")
        # the one temp-file writer: a link planted at the name since is replaced, not followed
        replace_bytes(note, note.read_bytes() + line.encode())
    nxt.rename(dest)
