"""The diff text bakery writes for a series or a port: ``diff -u`` of each changed file
(through the process door), labelled as the series' diffs label them, a git diff
throughout where the diff renames or copies (every file patch with its ``diff --git``
header, as ``git diff`` writes it), kept text before the first file, and read back by
bakery's own parser before anything is written (``read_back``: a diff bakery cannot read
is a bakery bug, never the user's bad input). ``refresh``, ``port`` and ``port --update``
all write through here.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

from bakery import process
from bakery.bake.plan import Plan, plan
from bakery.context import Context
from bakery.errors import BakeryError, DiffError
from bakery.logs import muted
from bakery.patch import provenance
from bakery.patch.diffs import Diff
from bakery.patch.parse import read_diff
from bakery.patch.series import Series, load_series
from bakery.sources.pristine import Pristine
from bakery.sources.resolve import release

_log = logging.getLogger(__name__)


#: (path, before, after) for each file a diff changes; None is "absent".
Change = tuple[str, bytes | None, bytes | None]


def labels_of(diff: Diff | None, strip: int, root: str) -> tuple[str, str]:
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


def series_labels(
    series_path: Path, home: Path, strip: int, root: str
) -> dict[str, tuple[str, str]]:
    """Header prefixes by diff name, from the series' own diffs (never from a port, so a
    port whose headers drifted is rewritten with the series' prefixes)."""
    own = load_series(str(series_path), home).load_diffs()
    return {d.name: labels_of(d, strip, root) for d in own}


def _label(prefix: str, path: str, root: str) -> str:
    rel = path[len(root) + 1 :] if root and path.startswith(root + "/") else path
    return f"{prefix}/{rel}" if prefix else rel


def moves_of(diff: Diff | None) -> dict[str, str]:
    """The diff's git renames: new path -> old path (refresh writes them back as renames)."""
    if diff is None:
        return {}
    return {  # paths are None in a diff not resolved against a tree: no renames to keep
        fp.new_path: fp.old_path
        for fp in diff.files
        if fp.move == "rename" and fp.new_path and fp.old_path
    }


def render_diff(
    changes: list[Change],
    prefixes: tuple[str, str],
    root: str,
    moves: Mapping[str, str] | None = None,
) -> bytes:
    """Plain `diff -u` text (no timestamps) for the changes, in the order given; a file
    that ``moves`` (new path -> old path) renames, where the changes still delete the old
    and create the new, as a git rename (``rename from``/``rename to``, then its hunks).

    A diff with a rename is a git diff throughout: every file patch gets its
    ``diff --git`` line (and ``new file mode``/``deleted file mode`` where it creates or
    deletes), as ``git diff`` writes it. Mixed with plain ``---``/``+++`` patches, a
    rename without hunks would take the next file's ``---`` line into its git header,
    which bakery's parser and ``git apply`` refuse (a new team's trial, finding 1)."""
    out = []
    by_path = {p: (b, a) for p, b, a in changes}
    renamed = {
        new: old
        for new, old in (moves or {}).items()
        if by_path.get(new, (b"", None))[0] is None and by_path.get(old, (None, b""))[1] is None
    }
    with tempfile.TemporaryDirectory(prefix="bakery-refresh-") as tmp:
        a, b = Path(tmp) / "a", Path(tmp) / "b"
        for path, before, after in changes:
            la = "/dev/null" if before is None else _label(prefixes[0], path, root)
            lb = "/dev/null" if after is None else _label(prefixes[1], path, root)
            if path in renamed.values():
                continue  # written with its rename
            if path in renamed:
                old = renamed[path]
                before, la = by_path[old][0], _label(prefixes[0], old, root)
                out.append(
                    f"diff --git {la} {lb}\nrename from {_label('', old, root)}\n"
                    f"rename to {_label('', path, root)}\n".encode()
                )
            elif renamed and before != after:
                ga, gb = _label(prefixes[0], path, root), _label(prefixes[1], path, root)
                mode = (
                    "new file mode 100644\n"
                    if before is None
                    else "deleted file mode 100644\n"
                    if after is None
                    else ""
                )
                out.append(f"diff --git {ga} {gb}\n{mode}".encode())
            if before == after:
                continue
            a.write_bytes(before or b"")
            b.write_bytes(after or b"")
            proc = process.run(["diff", "-u", "--label", la, "--label", lb, str(a), str(b)])
            out.append(process.check(proc, f"diff -u of {path}", ok=(0, 1)))
    return b"".join(out)


class UnreadableDiff(BakeryError):
    """A diff bakery made that its own parser refuses: bakery's fault, never reported as
    the user's bad input (exit 2), and never written into the series or a port."""

    exit_code = 1


def read_back(name: str, text: bytes) -> bytes:
    """The text, once bakery's parser reads it as a diff (an empty text is no diff)."""
    if text:
        try:
            read_diff(Path(name), text)
        except DiffError as e:
            raise UnreadableDiff(
                f"bakery made {name} in a form it cannot read back ({e.problem}); "
                "nothing was written from it: this is a bakery bug, please report it"
            ) from None
    return text


def in_diff_order(diff: Diff | None, paths: list[str]) -> list[str]:
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


def _is_port_of(name: str, version: Version) -> bool:
    try:
        return Version(name) == version
    except InvalidVersion:
        return False


def port_texts(series: Series, pl: Plan, pristine: Pristine, home: Path) -> list[bytes]:
    """The text of each diff of a port made from a plan on ``pristine``: what refresh
    writes for it (the series' own header prefixes, files in the diff's order)."""
    strip, root = int(pl.report.layout["strip"]), str(pl.report.layout["root"])  # type: ignore[call-overload]
    return render_port(series, home, strip, root, changes_from_plan(pl, pristine))


def render_port(
    series: Series, home: Path, strip: int, root: str, per_diff: list[list[Change]]
) -> list[bytes]:
    """Per diff of the series (in order), the port's text for its changes: the series'
    own header prefixes, files in the diff's order."""
    labels = series_labels(series.path, home, strip, root)
    texts = []
    for d, changes in zip(series.load_diffs(), per_diff, strict=True):
        ordered = {p: (p, b, a) for p, b, a in changes}
        text = render_diff(
            [ordered[p] for p in in_diff_order(d, list(ordered))],
            labels.get(d.name) or labels_of(d, strip, root),
            root,
            moves_of(d),
        )
        texts.append(read_back(d.name, text))
    return texts


def stale_ports(ctx: Context, series: Series, only: Version | None = None) -> list[str]:
    """Ports whose committed diffs differ from what refresh writes for their own bake;
    with ``only``, just that release's port (a CI job checks the release it has cached)."""
    home = ctx.home
    root_dir = home / "patches" / series.name
    problems: list[str] = []
    if not root_dir.is_dir():
        return problems
    for port in sorted(p for p in root_dir.iterdir() if p.is_dir()):
        if only is not None and not _is_port_of(port.name, only):
            continue
        _log.info(f"Checking port {port.relative_to(home)}", extra={"event": "diff"})
        rel = port.relative_to(home)
        problems += [f"{rel}: {line}" for line in provenance.stale_lines(series.path, port)]
        s = load_series(str(series.path), home)
        s = s.with_port(port)
        pristine = release(port.name, ctx.cache)
        with muted():
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


_HUNK = re.compile(rb"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def diffstat(text: bytes) -> str:
    """ "N files, +A -D" of a diff's text: files by their ``diff --git`` lines (a rename
    without hunks is a file), else by ``+++`` lines; lines counted inside hunks only (a
    mail's ``---`` separator and diffstat are no deletions)."""
    lines = text[len(head_text(text)) :].splitlines()
    git = sum(1 for line in lines if line.startswith(b"diff --git "))
    files = git or sum(1 for line in lines if line.startswith(b"+++ "))
    plus = minus = old = new = 0
    for line in lines:
        if old > 0 or new > 0:
            if line.startswith(b"+"):
                plus, new = plus + 1, new - 1
            elif line.startswith(b"-"):
                minus, old = minus + 1, old - 1
            elif not line.startswith(b"\\"):
                old, new = old - 1, new - 1
        elif m := _HUNK.match(line):
            old = int(m.group(1)) if m.group(1) is not None else 1
            new = int(m.group(2)) if m.group(2) is not None else 1
    return f"{files} file{'s' if files != 1 else ''}, +{plus} -{minus}"


def head_text(original: bytes) -> bytes:
    """What a diff has before its first file (mail headers, a message): kept on rewrite."""
    at = re.search(rb"^(diff --git |--- )", original, re.MULTILINE)
    return original[: at.start()] if at else b""
