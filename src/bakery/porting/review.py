"""``bakery diff-ports``: what each release's port needed beyond the series, hunk by hunk.

The way ``git range-diff`` pairs two versions of a patch series, each hunk of the series'
diff is paired with a hunk of the port's diff of the same name and file: by their
changes alone (the ``-``/``+`` lines; context and line numbers move with every release),
exactly first, then by the most similar change (difflib's ratio over their characters,
or over their lines for large hunks, at least one half, as range-diff pairs commits by
the size of their interdiff). A pair
is ``=`` (the same change, wherever the release put it) or ``!`` (changed: the interdiff
of the two hunks is shown); a hunk left alone is ``<`` (in the series only: the port
dropped it) or ``>`` (in the port only: what the release needed beyond the series).

The same view compares a port with itself at another commit of the project (``--since
REV`` or ``A..B``): the files are read from git through :mod:`bakery.git.cmd`. Pairing by
hand-written code rather than ``git range-diff`` itself: range-diff pairs commits, and a
port is a folder of plain diffs with no commits of its own.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from bakery.context import Context
from bakery.errors import UsageError
from bakery.git import cmd as gitutil
from bakery.model import records
from bakery.patch.diffs import Hunk
from bakery.patch.parse import read_diff
from bakery.patch.series import load_series, ordered_diffs


@dataclass
class Pair:
    mark: str  # = ! < >
    left: int | None  # hunk index on the left (series, or the older port)
    right: int | None
    header: str
    interdiff: list[str] = field(default_factory=list)


@dataclass
class FileView:
    diff: str
    path: str
    pairs: list[Pair] = field(default_factory=list)


@dataclass
class PortView:
    release: str
    left: str  # what is compared: "launcher/S/diffs" or "patches/S/R @ REV"
    right: str
    files: list[FileView] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {"=": 0, "!": 0, "<": 0, ">": 0}
        for f in self.files:
            for p in f.pairs:
                out[p.mark] += 1
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "release": self.release,
            "left": self.left,
            "right": self.right,
            "counts": self.counts(),
            "files": records.plain(self.files),
        }


def _changes(h: Hunk) -> list[str]:
    return [k + t for k, t in h.lines if k != " "]


#: Changes of two hunks at most this many characters together are compared character by
#: character (a line edited on both sides of a pair still counts as mostly the same).
#: difflib without autojunk is quadratic or worse in the length: two 600-line hunks
#: (about 40,000 characters) took more than a minute, 5,600 characters 0.19 s.
CHAR_CAP = 2_000
#: Larger changes are compared by whole lines, each line one element (two 600-line hunks:
#: milliseconds), up to this many lines together (a worst case of 2,000 repeated lines a
#: side: 0.6 s); above it, as multisets of lines (``quick_ratio``, linear).
LINE_CAP = 4_000
#: The most element comparisons (``len(a) * len(b)``, the quadratic term) that one
#: diff-ports spends on exact ratios; past it every pair is scored as multisets of lines,
#: so a port of thousands of near-alike hunks ends too (7 to 40 million a second: a few
#: seconds at worst).
WORK_CAP = 50_000_000


@dataclass
class Scorer:
    """How alike two hunks' changes are (0 to 1), within :data:`WORK_CAP` for a whole run.
    Hand-written over difflib because the bound is the point: a pair needs at least one
    half, so the cheap upper bounds (``real_quick_ratio``, ``quick_ratio``) settle most
    pairs, and only the rest pay for an exact ratio."""

    left: int = WORK_CAP
    #: element comparisons spent on exact ratios so far (the quadratic work)
    spent: int = 0
    #: the longest sequence handed to an exact ratio
    longest: int = 0

    def alike(self, ca: tuple[str, ...], cb: tuple[str, ...]) -> float:
        x, y = "\n".join(ca), "\n".join(cb)
        by_lines = difflib.SequenceMatcher(None, ca, cb, autojunk=False)
        if len(x) + len(y) <= CHAR_CAP:
            m: difflib.SequenceMatcher[str] = difflib.SequenceMatcher(None, x, y, autojunk=False)
            n, k = len(x), len(y)
        elif len(ca) + len(cb) <= LINE_CAP:
            m, n, k = by_lines, len(ca), len(cb)
        else:
            return by_lines.quick_ratio()
        if m.real_quick_ratio() < 0.5 or m.quick_ratio() < 0.5:
            return 0.0  # cannot be half alike: no pair
        if n * k > self.left:
            return by_lines.quick_ratio()
        self.left -= n * k
        self.spent += n * k
        self.longest = max(self.longest, n, k)
        return m.ratio()


def _header(h: Hunk) -> str:
    return f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@"


def _match(left: list[Hunk], right: list[Hunk], scorer: Scorer) -> tuple[dict[int, int], set[int]]:
    """right index -> left index: the same changes first, then the most similar (at
    least half alike); and the left hunks left unpaired."""
    lc = [tuple(_changes(h)) for h in left]
    rc = [tuple(_changes(h)) for h in right]
    by_changes: dict[tuple[str, ...], list[int]] = {}
    for i, c in enumerate(lc):
        by_changes.setdefault(c, []).append(i)
    matched: dict[int, int] = {}
    free = set(range(len(left)))
    for j, c in enumerate(rc):
        same = by_changes.get(c)
        if same:
            matched[j] = same.pop(0)
            free.discard(matched[j])
    for j, c in enumerate(rc):
        if j in matched:
            continue
        scored = [(scorer.alike(lc[i], c), -i) for i in free]
        best = max(scored, default=(0.0, 0))
        if best[0] >= 0.5:
            matched[j] = -best[1]
            free.discard(-best[1])
    return matched, free


def _pair(left: list[Hunk], right: list[Hunk], scorer: Scorer) -> list[Pair]:
    """Pairs in the right side's order, the left's unpaired hunks where they fell."""
    matched, free = _match(left, right, scorer)
    pairs: list[Pair] = []
    for j, h in enumerate(right):
        i = matched.get(j)
        if i is None:
            pairs.append(Pair(">", None, j + 1, _header(h)))
            continue
        for k in sorted(x for x in free if x < i):  # series hunks the port dropped, in place
            pairs.append(Pair("<", k + 1, None, _header(left[k])))
            free.discard(k)
        same = _changes(left[i]) == _changes(h)
        inter = [] if same else _interdiff(left[i], h)
        pairs.append(Pair("=" if same else "!", i + 1, j + 1, _header(h), inter))
    pairs += [Pair("<", k + 1, None, _header(left[k])) for k in sorted(free)]
    return pairs


_RANGE = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _interdiff(a: Hunk, b: Hunk) -> list[str]:
    """The change between two versions of a hunk, as range-diff shows it: a diff of diffs.

    Large hunks (over :data:`LINE_CAP` lines together) first lose the lines they share at
    both ends (difflib's matching blocks cost far more than linear on long sequences: two
    20,000-line hunks took 54 s), and a middle still over the cap is told in one line."""
    x, y = [k + t for k, t in a.lines], [k + t for k, t in b.lines]
    skip = 0
    if len(x) + len(y) > LINE_CAP:
        short = min(len(x), len(y))
        same = next((i for i in range(short) if x[i] != y[i]), short)
        tail = next((i for i in range(short - same) if x[-1 - i] != y[-1 - i]), short - same)
        skip, end = max(0, same - 1), max(0, tail - 1)  # one shared line kept each side
        x, y = x[skip : len(x) - end], y[skip : len(y) - end]
        if len(x) + len(y) > LINE_CAP:
            return [
                f"@@ the hunks differ in lines {skip + 1} to {skip + max(len(x), len(y))} "
                f"({len(x)} and {len(y)} lines): too long to compare here @@"
            ]
    out = []
    for line in difflib.unified_diff(x, y, lineterm="", n=1):
        if line.startswith(("---", "+++")):
            continue
        m = _RANGE.match(line) if skip else None
        if m:
            line = (
                f"@@ -{int(m[1]) + skip}{m[2] or ''} +{int(m[3]) + skip}{m[4] or ''} @@"
                + line[m.end() :]
            )
        out.append(line)
    return out


def _by_file(data: bytes | None, name: str) -> dict[str, list[Hunk]]:
    if data is None:
        return {}
    d = read_diff(Path(name), data)
    out: dict[str, list[Hunk]] = {}
    for fp in d.files:
        path = fp.new_name if fp.new_name != "/dev/null" else fp.old_name
        out.setdefault(path.split("/", 1)[-1] if "/" in path else path, []).extend(fp.hunks)
    return out


def compare(
    left: dict[str, bytes], right: dict[str, bytes], view: PortView, scorer: Scorer | None = None
) -> PortView:
    """Fill the view from two sets of diffs by name (series or older port, and port),
    pairing hunks within the scorer's bound (a new one: :data:`WORK_CAP`)."""
    scorer = scorer if scorer is not None else Scorer()
    for name in sorted(set(left) | set(right)):
        lf, rf = _by_file(left.get(name), name), _by_file(right.get(name), name)
        for path in sorted(set(lf) | set(rf)):
            view.files.append(
                FileView(name, path, _pair(lf.get(path, []), rf.get(path, []), scorer))
            )
    return view


def _folder(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in ordered_diffs(folder)}


def _at(home: Path, rev: str, rel: str) -> dict[str, bytes]:
    """The diffs of a folder of the project at a commit (none when it did not exist)."""
    listing = gitutil.stdout_of(
        gitutil.git(home, "ls-tree", "--name-only", "-z", f"{rev}:{rel}", raw=True)
    )
    if listing is None:
        known = gitutil.git(home, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", raw=True)
        if known.returncode != 0:
            raise UsageError(f"{rev}: not a commit of the project")
        return {}
    out = {}
    for name in filter(None, listing.decode("utf-8", "replace").split("\0")):
        if name.endswith((".diff", ".patch")):
            data = gitutil.stdout_of(
                gitutil.git(home, "cat-file", "blob", f"{rev}:{rel}/{name}", raw=True)
            )
            if data is not None:
                out[name] = data
    return out


def diff_ports(
    ctx: Context, series_spec: str, *, vllm: str | None = None, since: str | None = None
) -> list[PortView]:
    """Per port (or --vllm's), the series' diffs against the port's; with ``since``
    (``REV`` or ``A..B``), the port at A against the port at B (the working tree)."""
    home = ctx.home
    series = load_series(series_spec, home)
    root = home / "patches" / series.name
    names = sorted(p.name for p in (root.iterdir() if root.is_dir() else []) if p.is_dir())
    if vllm is not None:
        if since is None and vllm not in names:
            raise UsageError(f"{series.name} has no port for {vllm}")
        names = [vllm]
    views = []
    scorer = Scorer()  # one bound for the whole run
    for release in names:
        rel = f"patches/{series.name}/{release}"
        if since is None:
            view = PortView(release, f"launcher/{series.name}/diffs", rel)
            views.append(
                compare(_folder(series.path / "diffs"), _folder(root / release), view, scorer)
            )
            continue
        a, _, b = since.partition("..")
        right = (
            _at(home, b, rel) if b else _folder(root / release) if (root / release).is_dir() else {}
        )
        view = PortView(release, f"{rel} @ {a}", f"{rel} @ {b}" if b else rel)
        views.append(compare(_at(home, a, rel), right, view, scorer))
    return views
