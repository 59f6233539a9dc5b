"""Verify results kept in bakery's cache, reused while nothing they depend on changed.

A verify run depends on (the *inputs*, :func:`inputs`):

- the bytes of every file of the series' tests folder, subfolders and linked folders
  included, and of its data files (the files at the series' top:
  ``known-defects.toml``, ``expectations.toml``...); a link counts by its target, a FIFO
  or device by its kind (never opened: a FIFO must not hang verify, even ``--no-reuse``);
- the tree's manifest (the release decides expectations and known defects);
- bakery's own test machinery (every file of :data:`MACHINERY`) and its version;
- the Python, torch, Triton, pytest, NumPy and pytest-xdist that run the tests, and the
  test environment (light, or a full one's interpreter, ``pyvenv.cfg``, installed
  distributions and ``.pth`` files: :func:`interpreter_env`);
- the device (``cpu`` under the interpreter, else the GPUs torch sees), the mode;
- the pytest arguments in their order, and the environment variables that steer Triton
  or pytest (``PYTEST_ADDOPTS=-k subset`` is another run than the full one);
- the bytes of every tree module the tests loaded. That list is only known after a
  run: the plugin's report records it (the loader's provenance), and the record keeps
  each file's sha256. A lookup first matches the other inputs (the *static key*), then
  hashes the recorded files of the tree at hand; a file that changed, appeared or went
  runs the suite again;
- and, since a test may read the tree by other means than the loader (``runpy`` on a
  ``baked_tree`` path, a subprocess such as dcp2's TTIR probe), every other file of the
  tree too (:func:`tree_digest`, ``.git`` and bytecode aside, a linked folder by its
  target: about 0.4 s of CPU for a vLLM tree of 9,000 files). Trees in other folders
  with the same bytes share results.

Layout: ``CACHE/verify/STATIC-FILES.json``, plain JSON, never executed. The cache is
data (SECURITY.md): a record is read through the cache policy (a real folder of the cache,
a regular file, bounded: never a link, FIFO or device), and believed only with its seal
(:mod:`bakery.safety.seal`: an HMAC under the user's key, kept outside the cache) and the
full static key it was made for. A record that does not parse, has the wrong shape, or
fails its seal is ignored (the suite runs and writes a new one); one that fails its seal
is said once (a warning: it was written elsewhere or edited). Records are written through
the one temp-file writer (:func:`bakery.outputs.replacing`).
Hand-written (a few dozen lines of hashing and JSON): no library keys test results by
the code a run imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import stat
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakery.safety import cachepolicy, seal

#: The shape of a record; another one is ignored. 2: sealed, with the full static key.
FORMAT = 2
#: The seal's kind of a verify record.
SEAL_KIND = "verify-record"
_log = logging.getLogger(__name__)
_said: set[str] = set()
FOLDER = "verify"
#: Packages whose version is an input.
_PACKAGES = ("torch", "triton", "pytest", "numpy", "pytest-xdist", "bakery")
#: Environment variables whose value is an input.
_ENV = re.compile(r"^(TRITON_|PYTEST_|BAKERY_RANK_|CUDA_VISIBLE_DEVICES$)")
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
#: Entries of a tests folder past which its linked folders are no longer walked.
_FOLLOW_MAX = 50_000
_HEX = re.compile(r"[0-9a-f]{64}")
#: A recorded tree file: a module's file under vllm/ (nothing outside the tree is read).
_MODULE_FILE = re.compile(r"vllm(/[A-Za-z_][A-Za-z0-9_]*)*(/__init__)?\.py")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry_digest(path: str) -> str:
    """What one entry of a folder is, never blocking and never following a link: a
    regular file's sha256, a link's target (``link:``), or the kind of a FIFO, socket or
    device (``special:``; never opened: a FIFO in a tree must not hang verify, even with
    ``--no-reuse``, since the key is made before every run)."""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return "link:" + os.readlink(path)
        if not stat.S_ISREG(st.st_mode):
            return f"special:{stat.S_IFMT(st.st_mode):o}"
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the lstat
                return "special:changed"
            h = hashlib.sha256()
            while chunk := f.read(1 << 20):  # hashlib.file_digest is Python 3.11+
                h.update(chunk)
            return h.hexdigest()
    except OSError as e:
        return f"unreadable:{e.errno}"


def _walk(
    folder: str, *, recursive: bool, skip: frozenset[str], follow: bool = False
) -> list[tuple[str, str]]:
    """(relative posix path, :func:`_entry_digest`) of every entry under folder, sorted.
    A linked folder is its target's name (``link:``), so pointing it elsewhere changes
    the key; with ``follow`` (the tests folder: pytest collects through links) its files
    are walked too, each real folder once. A tree's linked folders are not walked: the
    files a run loads through one are in the key by their bytes (:func:`module_files`)."""
    out: list[tuple[str, str]] = []
    stack = [""]
    seen = {os.path.realpath(folder)}
    while stack:
        rel_dir = stack.pop()
        try:
            with os.scandir(os.path.join(folder, rel_dir) if rel_dir else folder) as it:
                entries = list(it)
        except OSError as e:
            out.append((rel_dir, f"unreadable:{e.errno}"))
            continue
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.name.endswith(".pyc"):
                continue
            if entry.is_dir(follow_symlinks=False):
                if recursive and entry.name not in skip:
                    stack.append(rel)
                continue
            out.append((rel, _entry_digest(entry.path)))
            if follow and recursive and entry.is_symlink() and entry.is_dir():
                real = os.path.realpath(entry.path)
                if len(out) > _FOLLOW_MAX:  # a link to / must not walk the disk
                    out.append((rel + "/", "not walked: too many files"))
                elif real not in seen and entry.name not in skip:
                    seen.add(real)
                    stack.append(rel)
    out.sort()
    return out


def _files(folder: Path, *, recursive: bool, follow: bool = False) -> dict[str, str]:
    """Every file, link and special file under ``folder`` (relative posix path -> the
    sha256 of its bytes, ``link:TARGET``, or ``special:MODE``)."""
    if not folder.is_dir():
        return {}
    skip = frozenset(_SKIP_DIRS)
    return dict(_walk(str(folder), recursive=recursive, skip=skip, follow=follow))


def tree_digest(tree: Path) -> str:
    """sha256 over every entry of the tree (relative path, then a file's sha256, a link's
    target, or a special file's kind; see :func:`_walk`), in a stable order; ``.git``,
    ``__pycache__``, ``.pytest_cache`` and ``*.pyc`` left out."""
    h = hashlib.sha256()
    for rel, what in _walk(str(tree), recursive=True, skip=frozenset({*_SKIP_DIRS, ".git"})):
        h.update(os.fsencode(rel) + b"\0" + os.fsencode(what) + b"\0")
    return h.hexdigest()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def device(interpret: bool) -> str:
    """The device in words: ``cpu`` under the interpreter, else the GPUs torch sees
    (the name of ``cuda:0`` and how many, found without importing torch: gpus.py)."""
    from bakery.testing import gpus

    if interpret:
        return gpus.INTERPRETER

    try:
        return gpus.visible().describe()
    except gpus.TorchMissing:
        return "no torch"


@dataclass(frozen=True)
class Run:
    """What a run of a series' tests was asked to be (the verify plan's part that the key
    names; bakery.verifying.plan makes the plan, this layer cannot take it)."""

    tests_dir: Path
    tree: Path
    interpret: bool
    pytest_args: Sequence[str]
    series_dir: Path | None
    #: the device in words (None: :func:`device`'s answer)
    device_name: str | None = None
    #: the test environment's name, and its interpreter (None: bakery's own)
    env_mode: str = "light"
    python: str | None = None


def inputs(run: Run, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything but the loaded tree modules that a run's result depends on (``env``:
    the environment whose variables count, default this process's)."""
    from bakery.testing.expect import MANIFEST

    manifest = run.tree / MANIFEST
    env = os.environ if env is None else env
    return {
        "format": FORMAT,
        "tests": _files(run.tests_dir, recursive=True, follow=True),
        "series": _files(run.series_dir, recursive=False) if run.series_dir else {},
        "manifest": _digest(manifest.read_bytes()) if manifest.is_file() else None,
        "tree": tree_digest(run.tree),
        "bakery": machinery(),
        "python": sys.version,
        # the test environment: light (bakery's) or full (vLLM's requirements, its own
        # interpreter; the environment's folder is keyed by its requirements, and what is
        # installed in it is in the key too)
        "env_mode": run.env_mode,
        "interpreter": run.python,
        "interpreter_env": interpreter_env(run.python) if run.python is not None else None,
        "packages": {name: _version(name) for name in _PACKAGES},
        "device": run.device_name if run.device_name is not None else device(run.interpret),
        "interpret": run.interpret,
        "pytest_args": list(run.pytest_args),
        "env": {k: v for k, v in sorted(env.items()) if _ENV.match(k)},
    }


#: The packages whose source is bakery's test machinery (the plugin, the loader, the
#: runner that reads the report): an edit of any of their files runs the suite again.
MACHINERY = ("bakery.testing", "bakery.verifying")


def machinery() -> dict[str, str]:
    """Every file of the :data:`MACHINERY` packages, by package (``bakery.testing/plugin.py``)."""
    import importlib.util

    out: dict[str, str] = {}
    for name in MACHINERY:
        module = sys.modules.get(name)  # where it was imported from, else found (not run)
        where = getattr(module, "__file__", None)
        if module is None:
            with contextlib.suppress(ImportError, ValueError):
                spec = importlib.util.find_spec(name)
                where = spec.origin if spec is not None else None
        if where:
            for rel, what in _files(Path(where).parent, recursive=True).items():
                out[f"{name}/{rel}"] = what
    return out


def interpreter_env(python: str) -> dict[str, str]:
    """What another interpreter's environment holds (a full environment's): its
    ``pyvenv.cfg`` (the Python it was made from) and the names of its installed
    distributions (``torch-2.9.0.dist-info``: name and version), without starting it."""
    root = Path(python).parent.parent
    out = {"pyvenv.cfg": _entry_digest(str(root / "pyvenv.cfg"))}
    for site in sorted(root.glob("lib*/python*/site-packages")):
        with contextlib.suppress(OSError):
            for entry in sorted(os.listdir(site)):
                if entry.endswith((".dist-info", ".egg-info", ".pth")):
                    rel = f"{site.relative_to(root).as_posix()}/{entry}"
                    out[rel] = _entry_digest(str(site / entry)) if entry.endswith(".pth") else ""
    return out


def static_key(data: Mapping[str, Any]) -> str:
    return _digest(json.dumps(data, sort_keys=True).encode())


def module_files(tree: Path, names: Sequence[str]) -> dict[str, str | None]:
    """For each loaded ``vllm.*`` name, its file and its package's ``__init__.py`` in the
    tree: sha256, or None where absent (a module that was stood in because its file
    did not load lightly is covered too: a fix of that file changes the run)."""
    out: dict[str, str | None] = {}
    for name in names:
        parts = name.split(".")
        for rel in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
            what = _entry_digest(str(tree / rel))  # a link or FIFO: None, never read
            out[rel] = what if _HEX.fullmatch(what) else None
    return out


def files_key(files: Mapping[str, str | None]) -> str:
    return _digest(json.dumps(sorted(files.items())).encode())


@dataclass(frozen=True)
class Record:
    key: str
    date: str
    result: dict[str, Any]
    #: the tree the run used (its modules' details are relative to it)
    tree: str


def short(key: str) -> str:
    return key[:16]


def _valid(data: Any, static: str) -> bool:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return False
    files, result = data.get("files"), data.get("result")
    if not isinstance(files, dict) or not isinstance(result, dict):
        return False
    for rel, sha in files.items():
        if not _MODULE_FILE.fullmatch(str(rel)) or not (sha is None or _HEX.fullmatch(str(sha))):
            return False
    if data.get("static") != static:  # a sealed record of other inputs, renamed
        return False
    return all(isinstance(data.get(k), str) for k in ("key", "date", "tree"))


def _say_once(text: str) -> None:
    if text not in _said:
        _said.add(text)
        _log.warning(text)


def folder(root: Path, *, make: bool) -> Path | None:
    """``CACHE/verify``: a real folder of the cache (a link there is replaced by a folder
    when making, else nothing is read behind it)."""
    return cachepolicy.top(root, FOLDER, repair=make)


def _read(p: Path, static: str) -> dict[str, Any] | None:
    """A record's data where it is one of ours for static: a regular file read under the
    cache policy, the right shape, and sealed by this user's key."""
    try:
        data = json.loads(cachepolicy.read_bytes(p, what="verify record"))
    except cachepolicy.CacheRefused as e:
        _say_once(f"{e}; it is ignored")
        return None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    mac = data.pop("seal", None)
    if not seal.valid_json(SEAL_KIND, data, mac):
        try:
            seal.key()
        except seal.SealUnavailable as e:
            _say_once(f"verify results are not reused: {e}")
            return None
        _say_once(
            f"a verify record in {p.parent} does not carry this machine's seal (written "
            "elsewhere or edited); it is ignored and the tests run"
        )
        return None
    return data if _valid(data, static) else None


def lookup(root: Path, static: str, tree: Path) -> Record | None:
    """The sealed record of ``static`` whose recorded tree files ``tree`` still has."""
    where = folder(root, make=False)
    if where is None:
        return None
    for p in sorted(where.glob(f"{static[:32]}-*.json")):
        if not cachepolicy.contained(root, p):
            _say_once(f"the verify record {p} is a symbolic link; it is ignored")
            continue
        data = _read(p, static)
        if data is None:
            continue
        files = data["files"]
        names = sorted({_module_of(rel) for rel in files})
        if module_files(tree, names) != files:
            continue
        return Record(data["key"], data["date"], data["result"], data["tree"])
    return None


def _module_of(rel: str) -> str:
    parts = rel.split("/")
    if parts[-1] == "__init__.py":
        parts = parts[:-1]
    else:
        parts[-1] = parts[-1][: -len(".py")]
    return ".".join(parts)


def store(
    root: Path, static: str, tree: Path, module_names: Sequence[str], result: dict[str, Any]
) -> str:
    """Record a finished run, sealed; its key (static key and loaded files' hashes). A
    cache that cannot be written, or no key to seal with, records nothing (the run
    stands; it is only not reused)."""
    from bakery.errors import BakeryError
    from bakery.outputs import replacing

    files = module_files(tree, module_names)
    fk = files_key(files)
    key = _digest(f"{static}:{fk}".encode())
    data: dict[str, Any] = {
        "format": FORMAT,
        "key": key,
        "static": static,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "tree": str(tree),
        "files": files,
        "result": result,
    }
    try:
        data["seal"] = seal.seal_json(SEAL_KIND, data)
        root.mkdir(parents=True, exist_ok=True)
        where = folder(root, make=True)
        final = where / f"{static[:32]}-{fk[:32]}.json" if where is not None else None
        # a link at the record's name is replaced, never written through (replacing)
        if final is not None and cachepolicy.real_dir(root, final.parent):
            with replacing(final) as fh:
                fh.write((json.dumps(data, indent=1) + "\n").encode())
    except seal.SealUnavailable as e:
        _say_once(f"verify results are not recorded for reuse: {e}")
    except (OSError, BakeryError):  # a read-only cache still verifies; it only forgets
        pass
    return key
