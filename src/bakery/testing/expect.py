"""What a series' bundled tests expect of a baked tree, read from the series' own data files.

``known-defects.toml`` registers defects that the series is known to have::

    [[defect]]
    id = "dcp2-mask-past-width"          # what the tests' known_defect marker names
    summary = "one line"
    input = "the smallest input that shows it"
    releases = ["0.30.0", "0.31.0"]      # the releases whose bake has it
    fix = "fixes/90-mask-past-width.diff" # the proposed fix (optional)
    raises = "AssertionError"             # the signature: the call's exception type ...
    match = "^mask keeps a past-the-width state"  # ... and a regex its message matches
    probe = "defect_inputs:mask_past_width"       # the entry's input, run (optional)

A test that hits a defect carries ``@pytest.mark.known_defect("ID")`` (static, or added at
run time with ``request.applymarker`` where the case's data decides); on a tree whose bake
has the defect (its release is listed, and the fix is not among the bake's diffs), the
test is expected to fail *with the signature*: an exception of type ``raises`` (or a
subclass) from the test's call, whose message ``match`` finds (``re.search``). Any other
failure is a plain failure naming what happened; a setup error is never the defect. When
the test passes, ``probe`` (``module:function`` in the tests folder, called with a
:class:`ProbeContext`) runs the defect's own input: it returns None when that input now
gives the right answer (the defect is gone: remove the entry), else what went wrong (the
test passes for another reason: a failure).

``expectations.toml`` says what each vLLM release has upstream, keyed on the release the
bake's manifest records, never on what the tree under test happens to hold::

    [release."0.33.0"]
    skips = ["test_x.py::test_rocm_*"]   # the only tests that may skip (fnmatch on node ids)
    skips_gpu = [...]                    # ... and, on a GPU only / under the interpreter only
    skips_interpret = [...]
    features = ["valid_blocks"]          # anything else: handed to the tests as is

A release not listed takes a range that holds it (a key that is a ``packaging`` specifier,
``[release.">=0.35.0.dev0"]``), else the newest listed release below it (upstream features
carry forward). A tree that is no pristine release (a dev tree, a checkout of main) takes
the listed release whose ``features`` its pristine files show, where the series names
``[probe.FEATURE]`` tables (testing/probes.py): a 0.31.0.dev0 tree with 0.31.0's ROCm top-k
takes 0.31.0's rules, not 0.30.0's. A defect's ``releases`` may hold ranges too. Both
files are read with tomllib; this module checks their shape.
"""

from __future__ import annotations

import fnmatch
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from bakery.safety.text import clean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFECTS_FILE = "known-defects.toml"
EXPECTATIONS_FILE = "expectations.toml"
MANIFEST = Path(".bakery") / "manifest.json"


class SeriesDataError(ValueError):
    """A data file of the series is malformed (the plugin turns it into a usage error).

    Its message quotes the series' data, which comes from another team: it is cleaned
    here, once (:func:`bakery.safety.text.clean`), so pytest's usage error and verify's
    line print no escape sequence and start no CI workflow command."""

    def __init__(self, message: str) -> None:
        super().__init__(clean(message))


@dataclass(frozen=True)
class Defect:
    id: str
    summary: str
    input: str
    releases: tuple[str, ...]
    fix: str | None = None
    #: The signature: the exception type's name (it or a base class) ...
    raises: str = "AssertionError"
    #: ... and a regex that its message must match (``re.search``).
    match: str = ""
    #: ``module:function`` in the tests folder that runs ``input`` (see the module doc).
    probe: str | None = None

    @property
    def fix_name(self) -> str | None:
        return Path(self.fix).name if self.fix else None

    def shows_in(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a failing test's call-phase exception) is this defect."""
        names = {cls.__name__ for cls in type(exc).__mro__}
        return self.raises in names and re.search(self.match, str(exc)) is not None

    @property
    def signature(self) -> str:
        return f"{self.raises} matching {self.match!r}"


@dataclass(frozen=True)
class Bake:
    """What the baked tree's manifest says: its release and the diffs applied.

    ``release`` is the release whose rules the tree takes: the one it is, for a pristine
    release; for a tree that is not one (sources/identity.py: a dev tree, a checkout of
    main), the listed release its code calls for (:func:`rules_for`), when the series
    probes features; else the release it declares. ``declared``: what it declares."""

    release: str | None
    diffs: tuple[str, ...] = ()
    declared: str | None = None
    pristine: bool = True

    @classmethod
    def of(cls, tree: Path, series_dir: Path | None = None) -> Bake:
        """What the tree's manifest says, read by bakery's one manifest reader
        (:func:`bakery.model.manifest.read`); a tree without a readable one is no bake."""
        from bakery.errors import BakeryError
        from bakery.model import manifest as manifests

        try:
            found = manifests.read(tree)
        except BakeryError:
            found = None
        if found is None:
            return cls(None)
        declared = found.version or found.claims
        pristine = found.pristine is not False
        names = tuple(d.name for d in found.diffs)
        release = declared
        if series_dir is not None and not pristine:
            from bakery.testing.probes import pristine_reader

            read = pristine_reader(tree, found.pristine_commit)
            release = rules_for(series_dir, declared, read) or declared
        return cls(release, names, declared, pristine)


@dataclass(frozen=True)
class Expectations:
    """One release's expectations: the skips allowed, the rest for the tests."""

    release: str | None  # the listed release they come from
    skips: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)

    def allows_skip(self, nodeid: str) -> bool:
        name = nodeid.split("/")[-1]
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.skips)


def _read(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > _MAX_FILE:
            raise SeriesDataError(f"{path}: larger than {_MAX_FILE} bytes")
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise SeriesDataError(f"{path}: {e}") from None
    except RecursionError:
        raise SeriesDataError(f"{path}: nested too deeply") from None


#: A series data file is a few kB; it is read whole.
_MAX_FILE = 4 << 20


def check_files(series_dir: Path) -> None:
    """Both files read and checked for shape, every entry (SeriesDataError, one line):
    verify calls this before pytest starts, so a malformed file is never an internal
    error of the pytest session."""
    load_defects(series_dir)
    path = series_dir / EXPECTATIONS_FILE
    if path.is_file():
        data = _read(path)
        _probes(path, data)  # a bad probe is said here, not first when a dev tree is verified
        table = data.get("release", {})
        if not isinstance(table, dict):
            raise SeriesDataError(f'{path}: [release."X.Y.Z"] tables expected')
        for key in table:
            load_expectations(series_dir, key, interpret=True)
            load_expectations(series_dir, key, interpret=False)


def _strings(path: Path, where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SeriesDataError(f"{path}: {where} must be a list of strings")
    return tuple(value)


def load_defects(series_dir: Path) -> dict[str, Defect]:
    path = series_dir / DEFECTS_FILE
    if not path.is_file():
        return {}
    defects: dict[str, Defect] = {}
    entries = _read(path).get("defect", [])
    if not isinstance(entries, list):
        raise SeriesDataError(f"{path}: [[defect]] entries expected")
    for n, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise SeriesDataError(f"{path}: defect {n} is not a [[defect]] table")
        defect = _defect(path, n, entry)
        if defect.id in defects:
            raise SeriesDataError(f"{path}: defect {defect.id} is registered twice")
        defects[defect.id] = defect
    return defects


#: A defect id is printed wherever the defect shows (pytest's summary, verify's counts,
#: matrix reports, CI logs): a plain name, so no id carries an escape sequence or a line of
#: its own.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_REQUIRED = {"id", "summary", "input", "releases", "match"}
_OPTIONAL = {"fix", "raises", "probe"}


def _defect(path: Path, n: int, entry: dict[str, Any]) -> Defect:
    missing = _REQUIRED - set(entry)
    if missing:
        raise SeriesDataError(f"{path}: defect {n} lacks {', '.join(sorted(missing))}")
    unknown = set(entry) - _REQUIRED - _OPTIONAL
    if unknown:
        raise SeriesDataError(f"{path}: defect {n}: unknown keys {', '.join(sorted(unknown))}")
    if not isinstance(entry["id"], str) or not _ID.fullmatch(entry["id"]):
        raise SeriesDataError(
            f"{path}: defect {n}: id {entry['id']!r} is not a plain name (letters, digits, "
            "'.', '_', '+', '-'; at most 100)"
        )
    raises = str(entry.get("raises") or "AssertionError")
    if not raises.isidentifier():
        raise SeriesDataError(f"{path}: defect {entry['id']}: raises must name an exception class")
    match = str(entry["match"])
    try:
        re.compile(match)
    except re.error as e:
        raise SeriesDataError(f"{path}: defect {entry['id']}: match: {e}") from None
    if not match:
        raise SeriesDataError(f"{path}: defect {entry['id']}: match must say how it shows")
    probe = str(entry["probe"]) if entry.get("probe") else None
    if probe is not None and not re.fullmatch(r"[A-Za-z_]\w*:[A-Za-z_]\w*", probe):
        raise SeriesDataError(f"{path}: defect {entry['id']}: probe must be module:function")
    return Defect(
        id=str(entry["id"]),
        summary=str(entry["summary"]).strip(),
        input=str(entry["input"]).strip(),
        releases=_strings(path, f"defect {entry['id']}: releases", entry["releases"]),
        fix=str(entry["fix"]) if entry.get("fix") else None,
        raises=raises,
        match=match,
        probe=probe,
    )


@dataclass(frozen=True)
class ProbeContext:
    """What a defect's probe is handed: the session's rank pools (``rank_pool(world)``),
    the tensors' device name and whether kernels run through the interpreter."""

    rank_pool: Any
    device: str
    interpret: bool


def active(defect: Defect, bake: Bake) -> bool:
    """Whether this bake has the defect: its release is listed (or unknown), and the
    defect's fix is not among the bake's diffs."""
    if defect.fix_name is not None and defect.fix_name in bake.diffs:
        return False
    return bake.release is None or listed(bake.release, defect.releases)


def _spec(text: str) -> SpecifierSet | None:
    if _version(text) is not None:
        return None
    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        return None


def listed(release: str, keys: Iterable[str]) -> bool:
    """A release is listed by its own name or by a range (a ``packaging`` specifier such as
    ``">=0.31.0.dev0,<0.33"``; pre- and dev releases included)."""
    v = _version(release)
    for key in keys:
        if key == release:
            return True
        spec = _spec(key)
        if spec is not None and v is not None and spec.contains(v, prereleases=True):
            return True
    return False


def _probes(path: Path, data: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    from bakery.testing.probes import check_probe

    table = data.get("probe", {})
    if not isinstance(table, dict):
        raise SeriesDataError(f"{path}: [probe.NAME] tables expected")
    try:
        return {name: check_probe(name, entry, str(path)) for name, entry in table.items()}
    except ValueError as e:
        raise SeriesDataError(str(e)) from None


def rules_for(series_dir: Path, version: str | None, read: Any) -> str | None:
    """The listed release whose rules a tree that is no pristine release takes: the one
    whose ``features`` are the features probed from the tree's pristine files (nearest to
    the tree's version: the newest at or below it, else the oldest above). None when the
    series probes nothing, or no listed release has those features."""
    from bakery.testing.probes import probe

    path = series_dir / EXPECTATIONS_FILE
    if not path.is_file():
        return None
    data = _read(path)
    probes = _probes(path, data)
    table = data.get("release", {})
    if not probes or not isinstance(table, dict):
        return None
    found = probe(probes, read)
    matching = sorted(
        (v, key)
        for key, entry in table.items()
        if (v := _version(key)) is not None
        and isinstance(entry, dict)
        and frozenset(entry.get("features", [])) & frozenset(probes) == found
    )
    if not matching:
        return None
    wanted = _version(version) if version else None
    if wanted is None:
        return str(matching[-1][1])
    below = [key for v, key in matching if v <= wanted]
    return str(below[-1] if below else matching[0][1])


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def load_expectations(
    series_dir: Path, release: str | None, *, interpret: bool
) -> Expectations | None:
    """The expectations for ``release``: its own entry, else the newest listed release
    below it; None when the series has no expectations file or the release is unknown."""
    path = series_dir / EXPECTATIONS_FILE
    if not path.is_file() or release is None:
        return None
    table = _read(path).get("release", {})
    if not isinstance(table, dict):
        raise SeriesDataError(f'{path}: [release."X.Y.Z"] tables expected')
    key = _entry_key(table, release)
    if key is None:
        return None
    if not isinstance(table[key], dict):
        raise SeriesDataError(f'{path}: release "{key}" is not a table')
    entry = dict(table[key])
    skips = _strings(path, f"release {key}: skips", entry.pop("skips", []))
    by_mode = {
        mode: _strings(path, f"release {key}: skips_{mode}", entry.pop(f"skips_{mode}", []))
        for mode in ("gpu", "interpret")
    }
    skips += by_mode["interpret" if interpret else "gpu"]
    return Expectations(release=key, skips=skips, data=entry)


def no_rules(series_dir: Path, tree: Path, rules: str | None = None) -> str | None:
    """Why the series' data cannot apply to ``tree`` (one line), or None.

    A series with expectations or known defects keys them on the bake's release
    (``rules`` names one instead): without a release that the series has a rule for,
    its tests would check the tree against itself (every skip allowed, every defect
    active, the tree's own behaviour taken for its release's)."""
    has_rules = (series_dir / EXPECTATIONS_FILE).is_file()
    if not has_rules and not (series_dir / DEFECTS_FILE).is_file():
        return None
    release = rules or Bake.of(tree, series_dir).release
    if release is None:
        why = f"{tree} records no vLLM release (no readable {MANIFEST})"
    elif _version(release) is None:
        why = f"{tree}: {release!r} is not a vLLM version"
    elif has_rules and load_expectations(series_dir, release, interpret=True) is None:
        why = f"{series_dir / EXPECTATIONS_FILE} has no rule for vLLM {release}"
    else:
        return None
    return (
        f"{why}; the series' tests would check the tree against itself: "
        "name the release whose rules apply (--bakery-rules RELEASE)"
    )


def _entry_key(table: Mapping[str, Any], release: str) -> str | None:
    """The entry a release takes: its own; else a range (specifier key) that holds it;
    else the newest listed release below it."""
    if release in table:
        return release
    wanted = _version(release)
    if wanted is None:
        return None
    for key in table:
        spec = _spec(key)
        if spec is not None and spec.contains(wanted, prereleases=True):
            return key
    below = sorted(
        ((v, key) for key in table if (v := _version(key)) is not None and v <= wanted),
        reverse=True,
    )
    return below[0][1] if below else None
