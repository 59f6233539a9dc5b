"""``refresh`` from a working tree that the series has moved past: ``bakery init``'s tree.

``init`` gives a pristine checkout, baked from no diff. The first ``refresh --tree
work/S --new-diff NAME`` writes ``01-NAME.diff`` from it; the tree still says it was
baked from no diff, yet its files now hold that diff and every edit since. A refresh
refuses a tree baked from other diffs than the series' (the commits that split its
changes by diff would not be the series'), so the second refresh from the same tree
failed, and a person kept editing it the way quilt and git users do.

A tree baked from the first diffs of the series (none, for init's), with no port and not
stopped at a conflict, is refreshed this way: the series is baked now into a scratch
tree beside it, which gets the tree's content for every file that either the tree
changed or the series changes, and that scratch tree is refreshed as usual (each diff
keeps its own part, the last diff touching a file takes the edits, a file no diff
touches needs ``--into`` or ``--new-diff``). The user's tree is only read.

A tree the series has moved past in a file (a change made through a bake, ``refresh
--tree build/S-X``, after this tree's last refresh) would undo that change silently (a new
team's trial, finding 3): the series' change is merged with the tree's edits (git
merge-file, the file as the tree held it at its last refresh the base) and said in a note;
where the two conflict, the refresh is refused, naming the file. What each file held at
the tree's last refresh is recorded in ``build/refresh/S.json`` (bakery's own place; a
missing record checks nothing, as before).
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from pathlib import Path

from bakery.bake.tree import bake
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.git import cmd as gitutil
from bakery.logs import muted
from bakery.model.manifest import Manifest
from bakery.model.manifest import read as read_checked
from bakery.patch.series import load_series
from bakery.porting import refresh as refreshing
from bakery.safety import paths
from bakery.sources.resolve import release

#: Files a refresh never carries (patch's leftovers).
_SKIP = (".rej", ".orig")
_LEFTOVER = "a *.orig or *.rej file: a patch leftover, never part of a diff"


def refresh(
    ctx: Context,
    series_spec: str,
    tree: Path,
    release_version: str | None = None,
    *,
    into: str | None = None,
    new_diff: str | None = None,
) -> refreshing.Refreshed:
    """:func:`bakery.porting.refresh.refresh`, also from a tree the series has moved past."""
    manifest = read_checked(tree) if tree.is_dir() else None
    if manifest is None or not _behind(ctx, series_spec, manifest):
        done = refreshing.refresh(
            ctx, series_spec, tree, release_version, into=into, new_diff=new_diff
        )
        if manifest is not None and _inits(manifest):
            _remember(ctx, series_spec, tree, manifest)
        return done
    series = load_series(series_spec, ctx.home)
    version = manifest.version or ""
    pristine = release(version, ctx.cache)
    try:
        with tempfile.TemporaryDirectory(prefix=".bakery-refresh-", dir=tree.parent) as tmp:
            scratch = Path(tmp) / tree.name
            with muted():
                report = bake(series, pristine, scratch)
            if not report.ok:
                raise UsageError(
                    f"--tree {tree}: the series no longer bakes on vLLM {version} "
                    f"(bakery apply {series.name} --vllm {version} says where)"
                )
            merged = _moved_past(ctx, series_spec, tree, manifest, scratch)
            skipped = _take_files(tree, manifest, scratch)
            for rel, text in merged.items():  # the series' change kept, with the tree's edits
                paths.inside(scratch, rel, "the scratch tree").write_bytes(text)
            try:
                done = refreshing.refresh(
                    ctx, series_spec, scratch, release_version, into=into, new_diff=new_diff
                )
            except BakeryError as e:  # said of the tree the user named, not the scratch
                e.message = e.message.replace(str(scratch), str(tree))
                raise
            # said, not silent: the README's hand-made diff recipe leaves x.orig in the tree
            done.notes += [f"ignored {rel} ({_LEFTOVER})" for rel in skipped]
            done.notes += [
                f"{rel}: this tree lacks the series' change to it made through another tree "
                "since its last refresh; kept in the diffs, merged with this tree's edits"
                for rel in merged
            ]
            if _inits(manifest):
                _remember(ctx, series_spec, tree, manifest)
            return done
    finally:
        pristine.close()


def _behind(ctx: Context, series_spec: str, manifest: Manifest) -> bool:
    """Baked from the series' first diffs only (fewer than it has now), from a release's
    own files, without a port, and not stopped at a conflict."""
    if manifest.port or manifest.stopped_at or manifest.pristine is False:
        return False
    if not manifest.version or not manifest.pristine_commit:
        return False
    try:
        names = [p.name for p in load_series(series_spec, ctx.home).diff_paths]
    except BakeryError:
        return False
    baked = [d.name for d in manifest.diffs]
    return len(baked) < len(names) and names[: len(baked)] == baked


def _changed(tree: Path, since: str, skipped: list[str] | None = None) -> list[str]:
    """Files of tree that differ from commit ``since`` (untracked ones included); the
    patch leftovers (``*.orig``, ``*.rej``) left out go to ``skipped``."""
    changed = gitutil.git(
        tree, "diff", "--no-ext-diff", "--no-textconv", "--name-only", "-z", "--no-renames", since
    )
    untracked = gitutil.git(tree, "ls-files", "-z", "--others", "--exclude-standard")
    found = []
    for path in dict.fromkeys(filter(None, (changed + "\0" + untracked).split("\0"))):
        paths.rel_path(path, f"--tree {tree}: git")
        if path.endswith(_SKIP) and skipped is not None:
            skipped.append(path)
        elif not path.startswith(".bakery/") and not path.endswith(_SKIP):
            found.append(path)
    return found


def _take_files(tree: Path, manifest: Manifest, scratch: Path) -> list[str]:
    """Give scratch the tree's content (or absence) for each file the tree changed since
    its pristine commit or the series changes; the tree's patch leftovers, not taken."""
    ours = read_checked(scratch)
    if not manifest.pristine_commit or ours is None or not ours.pristine_commit:
        raise UsageError(f"--tree {tree}: no pristine commit to compare with")
    skipped: list[str] = []
    wanted = dict.fromkeys(
        _changed(tree, manifest.pristine_commit, skipped) + _changed(scratch, ours.pristine_commit)
    )
    for rel in wanted:
        source = paths.inside(tree, rel, f"--tree {tree}")
        target = paths.inside(scratch, rel, "the scratch tree")
        if source.is_symlink() or not source.exists():
            if target.is_file() or target.is_symlink():
                target.unlink()
            continue
        paths.regular_file(source, f"--tree {tree}")  # a FIFO would block the copy
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink():
            target.unlink()
        shutil.copyfile(source, target)
        target.chmod(source.stat().st_mode & 0o777)
    return skipped


# --- a tree the series has moved past in a file (trial finding 3) ----------------------------


def _inits(manifest: Manifest) -> bool:
    """``bakery init``'s tree: baked from no diff, of a release's own files, no port."""
    return not manifest.diffs and not manifest.port and manifest.pristine is not False


def _record(ctx: Context, series_spec: str) -> Path:
    return ctx.home / "build" / "refresh" / f"{load_series(series_spec, ctx.home).name}.json"


def _content(root: Path, rel: str) -> bytes | None:
    p = paths.inside(root, rel, f"--tree {root}")
    if p.is_symlink() or not p.is_file():
        return None
    paths.regular_file(p, f"--tree {root}")
    return p.read_bytes()


def _read(record: Path) -> dict[str, dict[str, str | None]]:
    try:
        data = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(ctx: Context, series_spec: str, tree: Path, manifest: Manifest) -> None:
    """Record what the tree's changed files hold now (what the series was made from)."""
    if not manifest.pristine_commit:
        return
    record = _record(ctx, series_spec)
    trees = _read(record)
    held = {rel: _content(tree, rel) for rel in _changed(tree, manifest.pristine_commit)}
    trees[str(tree.resolve())] = {
        rel: None if b is None else base64.b64encode(b).decode() for rel, b in held.items()
    }
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(trees, indent=1, sort_keys=True) + "\n")


def _moved_past(
    ctx: Context, series_spec: str, tree: Path, manifest: Manifest, scratch: Path
) -> dict[str, bytes]:
    """Files the series changed since the tree's last refresh that the tree does not
    hold: the tree's edits merged with that change (path -> content), or, where the two
    conflict, a refusal; refreshing the tree's content alone would undo the change."""
    last = _read(_record(ctx, series_spec)).get(str(tree.resolve()))
    ours = read_checked(scratch)
    if not _inits(manifest) or not isinstance(last, dict) or ours is None:
        return {}
    merged: dict[str, bytes] = {}
    lost = []
    for rel in dict.fromkeys([*_changed(scratch, ours.pristine_commit or "HEAD"), *last]):
        now, held = _content(scratch, rel), _content(tree, rel)  # the series', the tree's
        then = _then(last, rel, scratch, ours.pristine_commit)
        if now == then or held == now:
            continue
        if now is None or then is None or held is None:
            lost.append(rel)
            continue
        text, conflicts = gitutil.merge_file(held, then, now, ("tree", "then", "series"))
        if conflicts:
            lost.append(rel)
        elif text != held:
            merged[rel] = text
    if lost:
        shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        name, version = load_series(series_spec, ctx.home).name, manifest.version or ""
        raise UsageError(
            f"--tree {tree}: the series changed {shown} since this tree was last refreshed "
            "(through another tree), where this tree changed it too; refreshing from it would "
            f"undo that: edit a bake of the series instead (bakery apply {name} --vllm "
            f"{version}, then bakery refresh {name} --tree build/{name}-{version})"
        )
    return merged


def _then(last: dict[str, str | None], rel: str, scratch: Path, commit: str | None) -> bytes | None:
    """What the file held at the tree's last refresh (the release's where unchanged)."""
    if rel in last:
        b = last[rel]
        return None if b is None else base64.b64decode(b)
    if not commit:
        return None
    return gitutil.stdout_of(gitutil.git(scratch, "cat-file", "blob", f"{commit}:{rel}", raw=True))
