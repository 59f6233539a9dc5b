"""``bakery diff-ports``: what each release's port needed beyond the series, hunk by hunk.

The way ``git range-diff`` pairs two versions of a patch series, each hunk of the series'
diff is paired with a hunk of the port's diff of the same name and file: by their
changes alone (the ``-``/``+`` lines; context and line numbers move with every release),
exactly first, then by the most similar change (difflib's ratio over their characters,
at least one half, as range-diff pairs commits by the size of their interdiff). A pair
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
from dataclasses import dataclass, field
from pathlib import Path

from bakery.context import Context
from bakery.errors import UsageError
from bakery.git import cmd as gitutil
from bakery.patch.parse import Hunk, read_diff
from bakery.patch.series import load_series, ordered_diffs


@dataclass
class Pair:
    mark: str  # = ! < >
    left: int | None  # hunk index on the left (series, or the older port)
    right: int | None
    header: str
    interdiff: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class FileView:
    diff: str
    path: str
    pairs: list[Pair] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"diff": self.diff, "path": self.path, "pairs": [p.to_json() for p in self.pairs]}


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
            "files": [f.to_json() for f in self.files],
        }


def _changes(h: Hunk) -> list[str]:
    return [k + t for k, t in h.lines if k != " "]


def _alike(a: Hunk, b: Hunk) -> float:
    """How alike two hunks' changes are, by characters (a line edited on both sides of
    a pair still counts as mostly the same)."""
    x, y = "\n".join(_changes(a)), "\n".join(_changes(b))
    return difflib.SequenceMatcher(None, x, y, autojunk=False).ratio()


def _header(h: Hunk) -> str:
    return f"@@ -{h.old_start},{h.old_len} +{h.new_start},{h.new_len} @@"


def _match(left: list[Hunk], right: list[Hunk]) -> tuple[dict[int, int], set[int]]:
    """right index -> left index: the same changes first, then the most similar (at
    least half alike); and the left hunks left unpaired."""
    matched: dict[int, int] = {}
    free = set(range(len(left)))
    for j, h in enumerate(right):
        exact = next((i for i in sorted(free) if _changes(left[i]) == _changes(h)), None)
        if exact is not None:
            matched[j] = exact
            free.discard(exact)
    for j, h in enumerate(right):
        if j in matched:
            continue
        scored = [(_alike(left[i], h), -i) for i in free]
        best = max(scored, default=(0.0, 0))
        if best[0] >= 0.5:
            matched[j] = -best[1]
            free.discard(-best[1])
    return matched, free


def _pair(left: list[Hunk], right: list[Hunk]) -> list[Pair]:
    """Pairs in the right side's order, the left's unpaired hunks where they fell."""
    matched, free = _match(left, right)
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


def _interdiff(a: Hunk, b: Hunk) -> list[str]:
    """The change between two versions of a hunk, as range-diff shows it: a diff of diffs."""
    lines = difflib.unified_diff(
        [k + t for k, t in a.lines], [k + t for k, t in b.lines], lineterm="", n=1
    )
    return [line for line in lines if not line.startswith(("---", "+++"))]


def _by_file(data: bytes | None, name: str) -> dict[str, list[Hunk]]:
    if data is None:
        return {}
    d = read_diff(Path(name), data)
    out: dict[str, list[Hunk]] = {}
    for fp in d.files:
        path = fp.new_name if fp.new_name != "/dev/null" else fp.old_name
        out.setdefault(path.split("/", 1)[-1] if "/" in path else path, []).extend(fp.hunks)
    return out


def compare(left: dict[str, bytes], right: dict[str, bytes], view: PortView) -> PortView:
    """Fill the view from two sets of diffs by name (series or older port, and port)."""
    for name in sorted(set(left) | set(right)):
        lf, rf = _by_file(left.get(name), name), _by_file(right.get(name), name)
        for path in sorted(set(lf) | set(rf)):
            view.files.append(FileView(name, path, _pair(lf.get(path, []), rf.get(path, []))))
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
    for release in names:
        rel = f"patches/{series.name}/{release}"
        if since is None:
            view = PortView(release, f"launcher/{series.name}/diffs", rel)
            views.append(compare(_folder(series.path / "diffs"), _folder(root / release), view))
            continue
        a, _, b = since.partition("..")
        right = (
            _at(home, b, rel) if b else _folder(root / release) if (root / release).is_dir() else {}
        )
        view = PortView(release, f"{rel} @ {a}", f"{rel} @ {b}" if b else rel)
        views.append(compare(_at(home, a, rel), right, view))
    return views
