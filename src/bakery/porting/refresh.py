"""Ports and refresh: turn an edited baked tree back into diffs, the way ``quilt refresh``
does, and check that committed ports reproduce from their own bake.

Where the diffs go: a tree of the series' base release refreshes the series' own diffs
(``launcher/<series>/diffs/``); a tree of another release its port
``patches/<series>/<release>/``, which holds diffs of the same names, in the same order,
rebased onto that release: plain ``diff -u`` text with the series' header prefixes and no
timestamps, so that refreshing an unchanged port rewrites the same bytes. A diff of the
series' own that the tree leaves unchanged is not rewritten (its mail headers, prose and
hunk layout stay); a rewritten one keeps the text before its first file.

Which diff gets which change: a file goes to the diffs that touched it in the bake (from
the manifest); with per-diff commits in the tree each diff gets its own step, and the last
diff touching a file also takes the edits made after the bake. An edited file that no diff
touches is refused unless the user says where it goes (``--into`` a diff, or
``--new-diff``), as quilt refreshes only the files a patch names. A tree that stopped at a
failing diff (``--keep-failed``) refreshes the diffs up to that one; those after it are
kept as they are, for the next ``apply`` to try.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.plan import plan
from bakery.bake.staging import umask
from bakery.context import Context
from bakery.errors import UsageError
from bakery.git import cmd as gitutil
from bakery.logs import muted
from bakery.model.manifest import BakedDiff, Manifest
from bakery.model.manifest import read as read_checked
from bakery.model.report import MANIFEST
from bakery.patch import provenance
from bakery.patch.diffs import Diff
from bakery.patch.series import Series, load_series, ordered_diffs
from bakery.porting.writer import (
    Change,
    diffstat,
    head_text,
    in_diff_order,
    labels_of,
    moves_of,
    port_texts,
    read_back,
    render_diff,
    series_labels,
)
from bakery.safety import paths
from bakery.sources import versions
from bakery.sources.resolve import release

_log = logging.getLogger(__name__)


_CONFLICT = re.compile(rb"^(<<<<<<< |>>>>>>> |=======$)", re.MULTILINE)
_SKIP = (".rej", ".orig")


# --- refresh from an edited tree --------------------------------------------------------------


@dataclass
class Refreshed:
    """What refresh wrote."""

    folder: Path  # the series' diffs/ folder, or the port
    release: str
    port: bool
    #: (diff name, "N files, +A -D" / "unchanged" / "kept as it is"), in series order.
    diffstat: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _show(tree: Path, rev: str, path: str) -> bytes | None:
    return gitutil.stdout_of(gitutil.git(tree, "cat-file", "blob", f"{rev}:{path}", raw=True))


def _work(tree: Path, path: str) -> bytes | None:
    p = paths.inside(tree, path, f"--tree {tree}")
    if p.is_symlink() or not p.exists():
        return None
    paths.regular_file(p, f"--tree {tree}")  # a FIFO would block the read
    return p.read_bytes()


_NEW_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _new_diff_name(names: list[str], wanted: str) -> str:
    stem = wanted[: -len(".diff")] if wanted.endswith(".diff") else wanted
    if not _NEW_NAME.fullmatch(stem):
        raise UsageError(f"--new-diff {wanted!r}: use letters, digits, '.', '_' and '-'")
    numbers = [n.split("-", 1)[0] for n in names]
    width = max((len(x) for x in numbers), default=2)
    nxt = max((int(x) for x in numbers if x.isdigit()), default=0) + 1
    return f"{nxt:0{width}d}-{stem}.diff"


#: The port of a tree that is no release (main, a ref, a local checkout): patches/S/next/.
NEXT = "next"
#: Beside a next/ port that ``refresh`` wrote: the tree it was made on (no proof:
#: ``port --promote`` bakes and verifies it on the release).
MADE_ON = "MADE-ON.json"


def _target(
    series: Series, port_rel: str | None, version: str, home: Path, release: bool = True
) -> tuple[Path, bool]:
    """(folder the refreshed diffs go to, is it a port); port_rel: the manifest's port.
    ``release``: the tree is the release it names; a tree of main, a ref or a local
    checkout (its files not the release's) writes ``patches/S/next/``, never a release's
    port or the series' own diffs (issue 45)."""
    if not release:
        return home / "patches" / series.name / NEXT, True
    if port_rel:
        port = paths.inside(home, port_rel, "the manifest's port")
        if port.is_dir():
            return port, True
    if series.base and versions.normalize(series.base) == versions.normalize(version):
        return series.path / "diffs", False
    return home / "patches" / series.name / version, True


def _made_from(
    series: Series, home: Path, port_rel: str | None, carries: Mapping[str, str] | None, tree: Path
) -> tuple[provenance.Record | None, Series]:
    """What the refreshed diffs are made from (FROM.toml), and the diffs the tree was baked
    from: the series', or, for a tree baked from a port, the series with that port."""
    if not (port_rel and (home / port_rel).is_dir()):
        return provenance.of_series(series.path, "refresh"), series
    baked_from = series.with_port(paths.inside(home, port_rel, f"--tree {tree}: port"))
    if provenance.carried(series.path, carries):  # a resolved `port --update` tree
        return provenance.of_series(series.path, "update"), baked_from
    return provenance.read(baked_from.diffs_dir), baked_from


def _version(series: Series, tree: Path, manifest: Manifest, release_version: str | None) -> str:
    """The release the refreshed diffs are for: the tree's own (``--release`` must agree),
    or, for a tree that is not a release's files (main, a ref, a local tree), its
    identity, whose port is next/ (issue 45: ``--release`` cannot make it another's)."""
    if manifest.pristine is False and release_version is not None:
        # a port is only for the release it was made from (issue 45)
        raise UsageError(
            f"--release {release_version}: {tree} is not that release's files "
            f"({manifest.identity or 'a local tree'}); a port is made only from the release "
            f"it is for: without --release, refresh writes patches/{series.name}/{NEXT}/"
        )
    if manifest.pristine is False:  # main, a ref, a local tree: next/
        return paths.name(manifest.identity or NEXT, f"--tree {tree}: identity")
    return paths.name(_release(tree, manifest.version, release_version), "--release")


def refresh(
    ctx: Context,
    series_spec: str,
    tree: Path,
    release_version: str | None = None,
    *,
    into: str | None = None,
    new_diff: str | None = None,
) -> Refreshed:
    """Write the tree's changes back into the diffs it was baked from (see the module)."""
    home = ctx.home
    series = load_series(series_spec, home)
    if not tree.is_dir():
        raise UsageError(f"--tree {tree}: no such folder")
    paths.git_link(tree, f"--tree {tree}")
    manifest = read_checked(tree)
    if manifest is None:
        raise UsageError(f"--tree {tree}: no {MANIFEST} (not a tree bakery baked)")
    gitutil.check_foreign(tree, f"--tree {tree}")
    if into and new_diff:
        raise UsageError("--into and --new-diff: give one of them")
    version = _version(series, tree, manifest, release_version)
    pristine_commit = manifest.pristine_commit
    if not pristine_commit:
        raise UsageError(f"--tree {tree}: the manifest records no pristine commit")
    strip, root = manifest.strip, manifest.root
    folder, is_port = _target(series, manifest.port, version, home, manifest.pristine is not False)
    # the diffs the tree was baked from: the port if it used one, else the series'
    port_rel = manifest.port
    # what the refreshed port is made from: the series' diffs now, or, for a tree baked
    # from a port, what that port was made from (a stale port stays stale until the
    # series' change is carried into it: ``bakery port --update``)
    record, series = _made_from(series, home, port_rel, manifest.carries, tree)
    diffs = series.load_diffs()
    for d in diffs:
        d.resolve_paths(strip, root)
    names = [d.name for d in diffs]
    labels = series_labels(series.path, home, strip, root)
    baked = [d.name for d in manifest.diffs]
    if baked != names:
        raise UsageError(
            f"--tree {tree}: baked from {', '.join(baked) or 'no diff'}, but the series now "
            f"has {', '.join(names) or 'no diff'}: bake it again (bakery apply "
            f"{series.name} --vllm {version}) and refresh that tree"
        )
    stopped = manifest.stopped_at
    last = names.index(stopped) if stopped in names else len(names) - 1

    touched = _touched(manifest, diffs, last)
    notes: list[str] = []
    extra = _unclaimed(tree, pristine_commit, touched, notes)
    commits = _commits(tree, pristine_commit, manifest.diffs, names)
    # --new-diff takes the edits made since the bake too, never folds them into the
    # diffs that touched those files (a new team's trial, finding 4)
    later = _edited_since_bake(tree, touched, names, commits) if new_diff else []
    new_name = _place(tree, names, last, touched, [*extra, *later], into=into, new_diff=new_diff)

    per_diff, edited = _changes(tree, pristine_commit, touched, names, commits)
    texts: dict[str, bytes | None] = {}  # None: keep the diff as it is
    pending = {name for k, name in enumerate(names) if k > last and name != new_name}
    for k, name in enumerate(names):
        if name in pending:
            texts[name] = None  # not applied in a stopped tree
            continue
        if not is_port and k < len(diffs) and name in commits and k not in edited:
            texts[name] = None  # unchanged: its bytes stay
            continue
        own = diffs[k] if k < len(diffs) else None
        changes = {p: (p, b, a) for p, b, a in per_diff[k]}
        prefixes = labels.get(name) or labels_of(own or (diffs[-1] if diffs else None), strip, root)
        body = render_diff(
            [changes[p] for p in in_diff_order(own, list(changes))], prefixes, root, moves_of(own)
        )
        if body and not is_port and own is not None:
            body = head_text(own.path.read_bytes()) + body
        texts[name] = read_back(name, body)
    done = _write(folder, is_port, version, diffs, names, texts, notes, tree, record)
    if folder.name == NEXT and manifest.pristine is False:
        _made_on(folder, manifest)
    settled = set()
    if is_port and pending and manifest.pristine is not False:
        settled = _settle_kept(ctx, series_spec, folder, version, pending)
    kept = {
        name: "not applied in the tree; written as its bake on the release gives it"
        if name in settled
        else "kept as it is (not applied in the tree)"
        for name in pending
    }
    done.diffstat = [(name, kept.get(name, stat)) for name, stat in done.diffstat]
    return done


def _touched(manifest: Manifest, diffs: list[Diff], last: int) -> dict[str, list[int]]:
    """Per file, the diffs (up to the one the tree stopped at) that touch it, in order."""
    touched: dict[str, list[int]] = {}
    for k, entry in enumerate(manifest.diffs[: last + 1]):
        for path in entry.files:
            touched.setdefault(path, []).append(k)
    for k, d in enumerate(diffs[: last + 1]):  # a rename's old path: the manifest names the new
        for old in moves_of(d).values():
            if k not in touched.setdefault(old, []):
                touched[old] = sorted([*touched[old], k])
    return touched


def _place(
    tree: Path,
    names: list[str],
    last: int,
    touched: dict[str, list[int]],
    moved: list[str],
    *,
    into: str | None,
    new_diff: str | None,
) -> str | None:
    """Give ``moved`` (files no diff touches, and with --new-diff the edits since the
    bake) to the diff the user named: the new diff (appended to ``names``; its name
    returned) or --into's; refused where the user named none. --new-diff with nothing
    to put in it is refused too, never silently ignored."""
    if not moved:
        if new_diff:
            raise UsageError(
                f"--new-diff {new_diff}: --tree {tree} has no change since its bake to put "
                "in a new diff (edit the tree, then refresh)"
            )
        return None
    new_name = None
    if new_diff:
        new_name = _new_diff_name(names, new_diff)
        names.append(new_name)
        where = len(names) - 1
    elif into:
        if into not in names[: last + 1]:
            raise UsageError(
                f"--into {into}: not a diff of the tree up to {names[last]} "
                f"({', '.join(names[: last + 1])})"
            )
        where = names.index(into)
    else:
        shown = ", ".join(moved[:5]) + (f" and {len(moved) - 5} more" if len(moved) > 5 else "")
        raise UsageError(
            f"--tree {tree}: {shown} changed, but no diff touches "
            f"{'them' if len(moved) > 1 else 'it'}; say where the change goes: "
            "--into NN-name.diff or --new-diff NAME"
        )
    for path in moved:
        touched[path] = [*touched.get(path, []), where]
    return new_name


def _settle_kept(
    ctx: Context, series_spec: str, folder: Path, version: str, kept: set[str]
) -> set[str]:
    """Rewrite a port's diffs that were kept as they are (the tree stopped before them) in
    the form refresh writes for the port's own bake, the form ``check --up-to-date``
    compares with (a new team's trial, finding 2: a kept format-patch rename was "not up
    to date" at once). Where the port does not bake on its release, they stay as they are
    (``check`` then says it does not apply). The names rewritten."""
    port = load_series(series_spec, ctx.home)
    port = port.with_port(folder)
    pristine = release(version, ctx.cache)
    try:
        with muted():
            pl = plan(port, pristine)
        if not pl.report.ok:
            return set()
        texts = port_texts(port, pl, pristine, ctx.home)
    finally:
        pristine.close()
    settled = set()
    for d, text in zip(port.load_diffs(), texts, strict=True):
        if d.name in kept and text and text != d.path.read_bytes():
            _replace_file(d.path, text)
            settled.add(d.name)
    return settled


def _made_on(folder: Path, manifest: Manifest) -> None:
    """next/'s record of the tree it was refreshed from: its identity and commit."""
    import json

    made = {"made_by": "refresh", "identity": manifest.identity, "commit": manifest.commit}
    (folder / MADE_ON).write_text(json.dumps(made, indent=1, sort_keys=True) + "\n")


def _release(tree: Path, baked: str | None, asked: str | None) -> str:
    """The release the tree was baked from (baked: the manifest's); --release must agree
    with the manifest."""
    if asked is not None:
        asked = versions.normalize(asked)
        if baked and versions.normalize(str(baked)) != asked:
            raise UsageError(
                f"--tree {tree} was baked from vLLM {baked}, not --release {asked}; "
                f"refresh it without --release (for {baked}), or bake {asked} and refresh that"
            )
    version = asked or baked
    if not version:
        raise UsageError(f"--tree {tree}: the manifest names no vLLM release; pass --release")
    return str(version)


def _unclaimed(
    tree: Path, pristine_commit: str, touched: dict[str, list[int]], notes: list[str]
) -> list[str]:
    """Files changed in the tree that no diff (applied in it) touches."""
    changed = gitutil.git(
        tree,
        "diff",
        "--no-ext-diff",
        "--no-textconv",
        "--name-only",
        "-z",
        "--no-renames",
        pristine_commit,
        "--",
    )
    untracked = gitutil.git(tree, "ls-files", "-z", "--others", "--exclude-standard")
    extra: list[str] = []
    for path in dict.fromkeys(filter(None, (changed + untracked).split("\0"))):
        paths.rel_path(path, f"--tree {tree}: git")
        if path.startswith(".bakery/") or path in touched:
            continue
        if path.endswith(_SKIP):
            notes.append(f"ignored {path}")
            continue
        if _show(tree, pristine_commit, path) == _work(tree, path):
            continue  # a file staged in a stopped tree, not changed
        extra.append(path)
    return sorted(extra)


def _edited_since_bake(
    tree: Path, touched: dict[str, list[int]], names: list[str], commits: dict[str, str]
) -> list[str]:
    """Files a diff touches whose content in the tree differs from that last diff's commit
    (HEAD where the tree has no commit of it): edited after the bake."""
    later = []
    for path, ks in sorted(touched.items()):
        rev = commits.get(names[ks[-1]], "HEAD")
        if _show(tree, rev, path) != _work(tree, path):
            later.append(path)
    return later


def _commits(
    tree: Path, pristine_commit: str, baked: list[BakedDiff], names: list[str]
) -> dict[str, str]:
    """Each diff's commit in the tree: the manifest's, or (older trees) by subject."""
    commits = {d.name: d.commit for d in baked if d.commit}
    if commits:
        return commits
    log = gitutil.git(
        tree,
        "log",
        "--no-ext-diff",
        "--reverse",
        "--format=%H %s",
        f"{pristine_commit}..HEAD",
        "--",
    )
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if subject in names:
            commits[subject] = sha
    return commits


def _changes(
    tree: Path,
    pristine_commit: str,
    touched: dict[str, list[int]],
    names: list[str],
    commits: dict[str, str],
) -> tuple[list[list[Change]], set[int]]:
    """Per diff, its (path, before, after) steps; and the diffs whose last step differs
    from their commit (edited after the bake, or given a new file)."""
    per_diff: list[list[Change]] = [[] for _ in names]
    edited: set[int] = set()
    for path, ks in touched.items():
        final = _work(tree, path)
        if final is not None and (m := _CONFLICT.search(final)):
            at = final[: m.start()].count(b"\n") + 1
            raise UsageError(f"{tree / path}:{at}: conflict markers are still in the file")
        prev = _show(tree, pristine_commit, path)
        for i, k in enumerate(ks):
            if i == len(ks) - 1:
                after = final
                if names[k] not in commits or _show(tree, commits[names[k]], path) != final:
                    edited.add(k)
            elif names[k] in commits:
                after = _show(tree, commits[names[k]], path)
            else:
                continue  # no step of its own: its change rolls into the next diff
            per_diff[k].append((path, prev, after))
            prev = after
    return per_diff, edited


def _write(
    folder: Path,
    is_port: bool,
    version: str,
    diffs: list[Diff],
    names: list[str],
    texts: dict[str, bytes | None],
    notes: list[str],
    tree: Path,
    record: provenance.Record | None = None,
) -> Refreshed:
    done = Refreshed(folder, version, is_port, notes=notes)
    originals = {d.name: d.path for d in diffs}
    for name in names:
        text = texts[name]
        if text is None:
            done.diffstat.append((name, "unchanged" if name in originals else "kept"))
        elif not text:
            if not is_port:
                raise UsageError(
                    f"--tree {tree}: {name} would be empty (the tree undoes it); "
                    "remove it from the series yourself if that is meant"
                )
            notes.append(f"{name}: no changes on {version}; left out of the port")
        else:
            done.diffstat.append((name, diffstat(text)))
    if is_port:
        _write_port(folder, version, originals, texts, tree, record)
    else:
        for name, text in texts.items():
            if text is not None:
                _replace_file(folder / name, text)
    return done


def _replace_file(path: Path, data: bytes) -> None:
    from bakery.outputs import replace_bytes

    replace_bytes(path, data)


def _write_port(
    out: Path,
    version: str,
    originals: dict[str, Path],
    texts: dict[str, bytes | None],
    tree: Path,
    record: provenance.Record | None = None,
) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.refresh-", dir=_mkdir(out.parent)))
    try:
        os.chmod(staging, 0o777 & ~umask())
        for name, text in texts.items():
            if text is None and name in originals:
                shutil.copyfile(originals[name], staging / name)
            elif text:
                (staging / name).write_bytes(text)
        if not any(staging.iterdir()):
            raise UsageError(f"--tree {tree}: no changes against the pristine release")
        if record is not None:
            provenance.write(staging, record)
        if out.exists():
            old = out.with_name(f".{version}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(staging, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    ordered_diffs(out)  # the port obeys the series' naming rules


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
