"""A series: an ordered folder of diffs, with optional settings in ``series.toml``.

Layout (``launcher/<name>/``)::

    series.toml       base release, root folder, strip count, description, test env (optional)
    diffs/NN-*.diff   applied in numeric order of NN (2 before 10; gaps are fine)
    tests/            the bundled tests ``bakery verify`` runs
    fixes/NN-*.diff   proposed fixes, offered and never imposed: applied after the series
                      only with ``bakery apply --with-fixes``; ``fixes/<release>/NN-*.diff``
                      is the variant of a fix for that release (one whose port differs)

A per-release port lives in ``patches/<name>/<release>/`` and holds diffs of the same names.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bakery.errors import SeriesError
from bakery.patch.diffs import Diff, agreeing_strip
from bakery.patch.parse import read_diff
from bakery.project import project_root, where_series_are
from bakery.safety import paths
from bakery.sources import versions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_NUMBERED = re.compile(r"(\d+)-.+\.(diff|patch)$")


@dataclass(frozen=True)
class DiffSource:
    """Which diffs a bake applies, and from where, as one value: the series' own
    (``diffs/``) or a port (``patches/SERIES/RELEASE/``), with the series' proposed fixes
    after them or none."""

    folder: Path
    is_port: bool = False
    fixes: tuple[Path, ...] = ()

    def __str__(self) -> str:
        what = "the port" if self.is_port else "the series' diffs"
        return f"{what} in {self.folder}" + (" with its fixes" if self.fixes else "")


@dataclass(frozen=True)
class Series:
    """A series as read from its folder: a value. Another source of diffs (a port, the
    fixes) is another value (:meth:`with_port`, :meth:`with_fixes`), never this one
    changed in place."""

    name: str
    path: Path
    diff_paths: tuple[Path, ...]
    base: str | None = None
    root: str | None = None  # folder (inside the vLLM tree) the diff paths are relative to
    strip: int | None = None
    description: str = ""
    #: the environment its tests need ("light" or "full": ``bakery verify --env``);
    #: None: verify's default (full on a GPU, light under the interpreter)
    env: str | None = None
    tests: Path | None = None
    port: Path | None = None  # set when diffs come from patches/<name>/<release>/
    #: the proposed fixes applied after the series (``--with-fixes``), in order
    fixes: tuple[Path, ...] = ()

    @property
    def diffs_dir(self) -> Path:
        return self.port if self.port is not None else self.path / "diffs"

    @property
    def source(self) -> DiffSource:
        """Which diffs it applies and from where."""
        return DiffSource(self.diffs_dir, self.port is not None, self.fixes)

    @functools.cached_property
    def _parsed(self) -> list[Diff]:
        return [read_diff(p) for p in self.diff_paths]

    def load_diffs(self) -> list[Diff]:
        """Parse every diff (raising DiffError on the first bad one) before anything is
        written; parsed once for this value."""
        return self._parsed

    def require_diffs(self) -> None:
        """A series with no diffs yet (just made by ``bakery init``) has nothing to bake."""
        if not self.diff_paths:
            raise SeriesError(
                f"{self.diffs_dir}: no NN-*.diff files (make one: bakery refresh "
                f"{self.name} --tree DIR --new-diff NAME)"
            )

    def with_port(self, port_dir: Path) -> Series:
        """The series with a port's diffs in place of its own."""
        return dataclasses.replace(
            self, port=port_dir, diff_paths=tuple(ordered_diffs(port_dir)), fixes=()
        )

    def with_fixes(self, version: str | None) -> Series:
        """The series with its proposed fixes applied after its diffs (``fixes_for``)."""
        fixes = tuple(fixes_for(self.path, version))
        names = {p.name for p in self.diff_paths}
        for fix in fixes:
            if fix.name in names:
                raise SeriesError(f"{fix}: a fix may not share its name with a diff of the series")
        return dataclasses.replace(self, fixes=fixes, diff_paths=(*self.diff_paths, *fixes))


def fixes_for(series_dir: Path, version: str | None) -> list[Path]:
    """The proposed fixes of a series for a release: ``fixes/NN-*.diff`` in numeric order,
    each replaced by ``fixes/<version>/`` 's file of the same name where there is one."""
    folder = series_dir / "fixes"
    if not folder.is_dir():
        raise SeriesError(f"{series_dir}: the series offers no fixes (no fixes/ folder)")
    fixes = ordered_diffs(folder)
    variants = folder / version if version else None
    if variants is not None and variants.is_dir():
        by_name = {p.name: p for p in ordered_diffs(variants)}
        unknown = set(by_name) - {p.name for p in fixes}
        if unknown:
            raise SeriesError(f"{variants}: {', '.join(sorted(unknown))} is no fix of fixes/")
        fixes = [by_name.get(p.name, p) for p in fixes]
    return fixes


def ordered_diffs(folder: Path, *, allow_empty: bool = False) -> list[Path]:
    """The folder's NN-*.diff files in numeric order. allow_empty: a series just begun
    (``bakery init``) has none yet; what bakes it refuses that (``require_diffs``)."""
    if not folder.is_dir():
        raise SeriesError(f"{folder}: no such diffs folder")
    numbered: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or p.suffix not in (".diff", ".patch"):
            continue
        if p.is_symlink():
            raise SeriesError(f"{p}: diffs must be plain files, not symlinks")
        if not p.is_file():  # a FIFO would block the read; a folder would be skipped
            try:
                paths.regular_file(p, "diffs")
            except paths.UnsafeDataError as e:
                raise SeriesError(e.message) from None
        m = _NUMBERED.match(p.name)
        if not m:
            raise SeriesError(f"{p}: diff name lacks a numeric prefix (NN-name.diff)")
        n = int(m.group(1))
        if n in numbered:
            raise SeriesError(f"{p}: number {n} is also used by {numbered[n].name}")
        numbered[n] = p
    if not numbered and not allow_empty:
        raise SeriesError(f"{folder}: no NN-*.diff files")
    return [numbered[n] for n in sorted(numbered)]


def load_series(spec: str, home: Path | None = None) -> Series:
    """A series by name (``launcher/<name>``) or by path to a series folder."""
    home = home or project_root()
    candidate = Path(spec)
    if "/" not in spec and spec not in (".", "..") and (home / "launcher" / spec).is_dir():
        folder = home / "launcher" / spec
    elif candidate.is_dir():
        folder = candidate
    else:
        raise SeriesError(f"unknown series {spec!r}{where_series_are(home)}")
    folder = folder.resolve()
    diffs_dir = folder / "diffs"
    if not diffs_dir.is_dir():
        raise SeriesError(f"{folder}: not a series (no diffs/ folder)")
    fields: dict[str, object] = {}
    toml_path = folder / "series.toml"
    if toml_path.is_file() or toml_path.is_symlink() or toml_path.exists():
        try:
            paths.regular_file(toml_path, "series.toml")
            data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise SeriesError(f"{toml_path}: {e}") from None
        except RecursionError:
            raise SeriesError(f"{toml_path}: nested too deeply") from None
        except OSError as e:
            raise SeriesError(f"{toml_path}: {e.strerror}") from None
        fields = _toml_fields(folder.name, toml_path, data)
    tests = folder / "tests"
    return Series(
        name=str(fields.pop("name", folder.name)),
        path=folder,
        diff_paths=tuple(ordered_diffs(diffs_dir, allow_empty=True)),
        tests=tests if tests.is_dir() else None,
        **fields,  # type: ignore[arg-type]
    )


#: series.toml's keys and the type of each (README "series.toml").
KEYS: dict[str, type] = {
    "name": str,
    "base": str,
    "root": str,
    "strip": int,
    "description": str,
    "env": str,
}
_KINDS = {str: "a string", int: "an integer"}


def _toml_fields(name: str, path: Path, data: dict[str, object]) -> dict[str, object]:
    """The Series fields series.toml sets (``name`` among them), checked."""
    _check_keys(path, data)
    try:  # the name becomes a folder name (patches/<name>, build/<name>-<version>)
        name = paths.name(data.get("name", name), f"{path}: name")
    except paths.UnsafeDataError as e:
        raise SeriesError(e.message) from None
    base, root, strip = data.get("base"), data.get("root"), data.get("strip")
    if base is not None and not _is_release(str(base)):
        # the base is fetched as --vllm would be: a path or git+URL here would let the
        # series' author choose what bakery reads or runs
        raise SeriesError(f"{path}: base must be a release version, not {str(base)!r}")
    if isinstance(strip, int) and not (0 <= strip <= 16):
        raise SeriesError(f"{path}: strip must be between 0 and 16")
    env = data.get("env")
    if env is not None and env not in ("light", "full"):
        raise SeriesError(f'{path}: env must be "light" or "full", not {env!r}')
    return {
        "name": name,
        # "0.32" is the release 0.32.0, as for --vllm
        "base": versions.normalize(base) if isinstance(base, str) else None,
        "strip": strip if isinstance(strip, int) else None,
        "description": str(data.get("description", "")),
        "root": _root(path, root) if isinstance(root, str) else None,
        "env": env if isinstance(env, str) else None,
    }


def _check_keys(path: Path, data: dict[str, object]) -> None:
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, list(KEYS), n=1)
            hints.append(f"{key} (did you mean {close[0]}?)" if close else key)
        raise SeriesError(
            f"{path}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}"
            f"; the keys are {', '.join(KEYS)}"
        )
    for key, typ in KEYS.items():
        value = data.get(key)
        # TOML's true is a Python bool, which isinstance(int) would let through as strip 1
        if key in data and (not isinstance(value, typ) or isinstance(value, bool)):
            raise SeriesError(f"{path}: {key} must be {_KINDS[typ]}, not {value!r}")


def _root(path: Path, root: str) -> str:
    """series.toml's root as a tree-relative folder: "." and "" are the tree's top."""
    parts = [p for p in root.split("/") if p not in ("", ".")]
    rel = "/".join(parts)
    if root.startswith("/") or ".." in parts or (rel and paths.unsafe(rel)):
        raise SeriesError(
            f'{path}: root must be a relative folder inside the tree ("." is its top), not {root!r}'
        )
    return rel


def _is_release(text: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        return False
    return "/" not in text and not text.startswith(".")


def detect_layout(series: Series, tree: Path) -> tuple[int, str, bool]:
    """(strip, root, detected?): series.toml's values, else the combination under which
    the most files the diffs modify exist in the tree. Without a strip in series.toml, a
    diff whose names fit the tree only under another strip (one made a folder higher than
    the others) gets that strip as its own (``Diff.strip``)."""
    if series.strip is not None and series.root is not None:
        return series.strip, series.root.strip("/"), False
    diffs = series.load_diffs()
    roots = [series.root.strip("/")] if series.root is not None else ["", "vllm"]
    strips = [series.strip] if series.strip is not None else [1, 0, 2, 3]
    names = [n for d in diffs for n in _layout_names(d)]
    best: tuple[int, int, str] | None = None
    for strip in strips:
        for root in roots:
            hits = _hits(names, strip, root, tree)
            if hits and (best is None or hits > best[0]):
                best = (hits, strip, root)
    if best is None:
        strip = series.strip if series.strip is not None else 1
        root = (series.root or "").strip("/")
        return strip, root, True
    _, strip, root = best
    if series.strip is None:
        for d in diffs:
            d.strip = _own_strip(d, strip, root, tree)
    return strip, root, True


def _layout_names(d: Diff) -> list[str]:
    """The names whose files should exist: the old names, and the new name of a plain
    diff whose two names differ (``x.orig``/``x``: the tree holds only ``x``)."""
    names = [fp.old_name for fp in d.files if not fp.is_new and fp.move is None]
    names += [
        fp.new_name
        for fp in d.files
        if not fp.git and not fp.is_new and not fp.is_delete and fp.new_name != fp.old_name
    ]
    return names or [fp.new_name for fp in d.files]


def _hits(names: list[str], strip: int, root: str, tree: Path) -> int:
    hits = 0
    for name in names:
        parts = [p for p in name.split("/") if p]
        if len(parts) <= strip:
            continue
        rel = "/".join(([root] if root else []) + parts[strip:])
        if ".." not in rel.split("/") and (tree / rel).is_file():
            hits += 1
    return hits


def _all_found(d: Diff, strip: int, root: str, tree: Path) -> bool:
    """Whether every file the diff modifies or deletes exists under this strip: one of the
    two names of a plain diff whose names differ (``x.orig``/``x``) is enough."""
    for fp in d.files:
        if fp.is_new or fp.move is not None:
            continue
        names = [fp.old_name]
        if not fp.git and not fp.is_delete and fp.new_name != fp.old_name:
            names.append(fp.new_name)
        if not _hits(names, strip, root, tree):
            return False
    return True


def _own_strip(d: Diff, strip: int, root: str, tree: Path) -> int | None:
    """The strip of one diff, where the series' does not fit it: its names agree (old and
    new name the same file) and more of them exist in the tree; None: the series' fits."""
    if all(fp.is_new or fp.move is not None for fp in d.files):
        return None  # nothing it reads to find in the tree (new files only): the series'
    both = [fp for fp in d.files if not fp.is_new and not fp.is_delete]
    need = max((agreeing_strip(fp) or 0 for fp in both), default=0)
    names = _layout_names(d)
    if need <= strip:
        if _hits(names, strip, root, tree):
            return None
        # every name missing under the series' strip: another only where all of them exist
        # (a file gone upstream must stay a missing file, not find a namesake elsewhere)
        full = [s for s in range(0, 8) if s != strip and _all_found(d, s, root, tree)]
        return full[0] if full else None
    scored = [(_hits(names, s, root, tree), -s, s) for s in range(need, 8)]
    hits, _, own = max(scored)
    return own if hits else need
