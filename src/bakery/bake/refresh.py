"""Ports: turn an edited baked tree back into the series' diffs, and check that committed
ports reproduce from their own bake.

A port ``patches/<series>/<release>/`` holds diffs of the same names, in the same order,
as the series, rebased onto one release: plain ``diff -u`` text with the series' header
prefixes and no timestamps, so that refreshing an unchanged port rewrites the same bytes.

Which diff gets which change: a file goes to the diffs that touched it in the bake (from
the manifest); with per-diff commits in the tree each diff gets its own step, and the last
diff touching a file also takes the edits made after the bake. A file that no diff touched
goes to the last diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bakery.bake.plan import Plan, plan
from bakery.bake.report import MANIFEST, read_manifest
from bakery.errors import BakeryError, UsageError
from bakery.git import cmd as gitutil
from bakery.patch.parse import Diff
from bakery.patch.series import Series, load_series, ordered_diffs, project_root
from bakery.sources.cache import Cache
from bakery.sources.resolve import Pristine, release

Events = Callable[[str, str], None]
#: (path, before, after) for each file a diff changes; None is "absent".
Change = tuple[str, bytes | None, bytes | None]

_CONFLICT = re.compile(rb"^(<<<<<<< |>>>>>>> |=======$)", re.MULTILINE)
_SKIP = (".rej", ".orig")


def _labels(diff: Diff | None, strip: int, root: str) -> tuple[str, str]:
    """The header prefixes a regenerated diff uses: the series' own (baked-ours/, baked/)."""
    if diff is not None:
        for fp in diff.files:
            names = [fp.old_name, fp.new_name]
            pre = ["/".join(n.split("/")[:strip]) for n in names if n != "/dev/null"]
            if len(pre) == 2:
                return pre[0], pre[1]
            if pre:
                return pre[0], pre[0]
    return ("a", "b") if strip == 1 else ("", "")


def _series_labels(
    series_path: Path, home: Path, strip: int, root: str
) -> dict[str, tuple[str, str]]:
    """Header prefixes by diff name, from the series' own diffs (never from a port, so a
    port whose headers drifted is rewritten with the series' prefixes)."""
    own = load_series(str(series_path), home).load_diffs()
    return {d.name: _labels(d, strip, root) for d in own}


def _label(prefix: str, path: str, root: str) -> str:
    rel = path[len(root) + 1 :] if root and path.startswith(root + "/") else path
    return f"{prefix}/{rel}" if prefix else rel


def render_diff(changes: list[Change], prefixes: tuple[str, str], root: str) -> bytes:
    """Plain `diff -u` text (no timestamps) for the changes, in the order given."""
    out = []
    with tempfile.TemporaryDirectory(prefix="bakery-refresh-") as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        for path, before, after in changes:
            if before == after:
                continue
            a.write_bytes(before or b"")
            b.write_bytes(after or b"")
            la = "/dev/null" if before is None else _label(prefixes[0], path, root)
            lb = "/dev/null" if after is None else _label(prefixes[1], path, root)
            proc = subprocess.run(
                ["diff", "-u", "--label", la, "--label", lb, str(a), str(b)],
                capture_output=True,
                check=False,
            )
            if proc.returncode not in (0, 1):
                raise BakeryError(f"diff failed on {path}: {proc.stderr.decode(errors='replace')}")
            out.append(proc.stdout)
    return b"".join(out)


def _ordered(diff: Diff | None, paths: list[str]) -> list[str]:
    """Files in the order the original diff lists them, then new ones sorted."""
    first = [fp.path for fp in diff.files] if diff is not None else []
    return [p for p in first if p in paths] + sorted(p for p in paths if p not in first)


def changes_from_plan(pl: Plan, pristine: Pristine) -> list[list[Change]]:
    """Per diff, the (path, before, after) of each file it writes, replaying the plan."""
    state: dict[str, bytes | None] = {}
    out = []
    for writes in pl.writes:
        changes = []
        for path, (content, _mode) in writes.items():
            if path in state:
                before = state[path]
            else:
                f = pristine.file(path)
                before = f.read_bytes() if f.is_file() else None
            changes.append((path, before, content))
            state[path] = content
        out.append(changes)
    return out


def port_texts(series: Series, pl: Plan, pristine: Pristine, home: Path) -> list[bytes]:
    """The text of each diff of a port made from a plan on ``pristine``: what refresh
    writes for it (the series' own header prefixes, files in the diff's order)."""
    strip, root = int(pl.report.layout["strip"]), str(pl.report.layout["root"])  # type: ignore[call-overload]
    labels = _series_labels(series.path, home, strip, root)
    texts = []
    for d, changes in zip(series.load_diffs(), changes_from_plan(pl, pristine), strict=True):
        ordered = {p: (p, b, a) for p, b, a in changes}
        texts.append(
            render_diff(
                [ordered[p] for p in _ordered(d, list(ordered))],
                labels.get(d.name) or _labels(d, strip, root),
                root,
            )
        )
    return texts


def stale_ports(
    series: Series, cache: Cache, events: Events | None = None, home: Path | None = None
) -> list[str]:
    """Ports whose committed diffs differ from what refresh writes for their own bake."""
    home = home or project_root()
    root_dir = home / "patches" / series.name
    problems: list[str] = []
    if not root_dir.is_dir():
        return problems
    for port in sorted(p for p in root_dir.iterdir() if p.is_dir()):
        if events:
            events("diff", f"Checking port {port.relative_to(home)}")
        s = load_series(str(series.path), home)
        s.use_port(port)
        pristine = release(port.name, cache)
        pl = plan(s, pristine)
        if not pl.report.ok:
            problems.append(f"{port.relative_to(home)}: does not apply to vLLM {port.name}")
            continue
        for d, text in zip(s.load_diffs(), port_texts(s, pl, pristine, home), strict=True):
            if text != d.path.read_bytes():
                problems.append(
                    f"{d.path.relative_to(home)}: differs from what "
                    "`bakery refresh` writes for its bake"
                )
    return problems


# --- refresh from an edited tree --------------------------------------------------------------


def _show(tree: Path, rev: str, path: str) -> bytes | None:
    proc = subprocess.run(
        ["git", "-c", "safe.directory=*", "cat-file", "blob", f"{rev}:{path}"],
        cwd=tree,
        capture_output=True,
        env=gitutil.clean_env(),
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


def _work(tree: Path, path: str) -> bytes | None:
    p = tree / path
    if p.is_symlink() or not p.is_file():
        return None
    return p.read_bytes()


def refresh(
    series_spec: str,
    tree: Path,
    release_version: str | None = None,
    events: Events | None = None,
    home: Path | None = None,
) -> tuple[Path, list[str]]:
    """Write patches/<series>/<release>/ from an edited baked tree. Returns (port, notes)."""
    home = home or project_root()
    series = load_series(series_spec, home)
    manifest = read_manifest(tree)
    if manifest is None:
        raise UsageError(f"--tree {tree}: no {MANIFEST} (not a tree bakery baked)")
    version = release_version or (manifest.get("vllm") or {}).get("version")
    if not version:
        raise UsageError(f"--tree {tree}: the manifest names no vLLM release; pass --release")
    pristine_commit = str(manifest.get("pristine_commit") or "")
    if not pristine_commit:
        raise UsageError(f"--tree {tree}: the manifest records no pristine commit")
    layout = manifest.get("layout") or {}
    strip, root = int(layout.get("strip", 1)), str(layout.get("root", ""))
    # the diffs the tree was baked from: the port if it used one, else the series'
    port_rel = manifest.get("port")
    if port_rel and (home / str(port_rel)).is_dir():
        series.use_port(home / str(port_rel))
    diffs = series.load_diffs()
    for d in diffs:
        d.resolve_paths(strip, root)
    names = [d.name for d in diffs]
    labels = _series_labels(series.path, home, strip, root)
    baked = [str(d["name"]) for d in manifest.get("diffs", [])]
    if baked != names:
        raise UsageError(f"--tree {tree}: baked from diffs {baked}, the series has {names}")

    touched: dict[str, list[int]] = {}
    for k, d in enumerate(manifest.get("diffs", [])):
        for f in d.get("files", []):
            touched.setdefault(str(f["path"]), []).append(k)
    changed = gitutil.git(tree, "diff", "--name-only", "-z", "--no-renames", pristine_commit)
    untracked = gitutil.git(tree, "ls-files", "-z", "--others", "--exclude-standard")
    notes = []
    for path in filter(None, (changed + untracked).split("\0")):
        if path.startswith(".bakery/"):
            continue
        if path.endswith(_SKIP):
            notes.append(f"ignored {path}")
            continue
        touched.setdefault(path, [len(names) - 1])
    commits: dict[str, str] = {}
    log = gitutil.git(tree, "log", "--reverse", "--format=%H %s", f"{pristine_commit}..HEAD")
    for line in log.splitlines():
        sha, _, subject = line.partition(" ")
        if subject in names:
            commits[subject] = sha

    per_diff: list[list[Change]] = [[] for _ in names]
    for path, ks in touched.items():
        final = _work(tree, path)
        if final is not None and _CONFLICT.search(final):
            at = final[: _CONFLICT.search(final).start()].count(b"\n") + 1  # type: ignore[union-attr]
            raise UsageError(f"{tree / path}:{at}: conflict markers are still in the file")
        prev = _show(tree, pristine_commit, path)
        for i, k in enumerate(ks):
            last = i == len(ks) - 1
            if last:
                after = final
            elif names[k] in commits:
                after = _show(tree, commits[names[k]], path)
            else:
                continue  # no step of its own: its change rolls into the next diff
            per_diff[k].append((path, prev, after))
            prev = after

    out = home / "patches" / series.name / version
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.refresh-", dir=_mkdir(out.parent)))
    try:
        for d, changes in zip(diffs, per_diff, strict=True):
            ordered = {p: (p, b, a) for p, b, a in changes}
            text = render_diff(
                [ordered[p] for p in _ordered(d, list(ordered))],
                labels.get(d.name) or _labels(d, strip, root),
                root,
            )
            if text:
                (staging / d.name).write_bytes(text)
            else:
                notes.append(f"{d.name}: no changes on {version}; left out of the port")
        if not any(staging.iterdir()):
            raise UsageError(f"--tree {tree}: no changes against the pristine release")
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
    return out, notes


def _mkdir(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p
