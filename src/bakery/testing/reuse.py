"""Verify results kept in bakery's cache, reused while nothing they depend on changed.

A verify run depends on (the *inputs*, :func:`inputs`):

- the bytes of every file of the series' tests folder and of its data files (the
  regular files at the series' top: ``known-defects.toml``, ``expectations.toml``...);
- the tree's manifest (the release decides expectations and known defects);
- bakery's own test machinery (the source of :mod:`bakery.testing`) and its version;
- the Python, torch, Triton, pytest, NumPy and pytest-xdist that run the tests;
- the device (``cpu`` under the interpreter, else the GPUs torch sees), the mode;
- the pytest arguments, and the environment variables that steer Triton or pytest;
- the bytes of every tree module the tests loaded. That list is only known after a
  run: the plugin's report records it (the loader's provenance), and the record keeps
  each file's sha256. A lookup first matches the other inputs (the *static key*), then
  hashes the recorded files of the tree at hand; a file that changed, appeared or went
  runs the suite again;
- and, since a test may read the tree by other means than the loader (``runpy`` on a
  ``baked_tree`` path, a subprocess such as dcp2's TTIR probe), every other file of the
  tree too (:func:`tree_digest`, ``.git`` and bytecode aside: about 0.4 s of CPU for a
  vLLM tree of 9,000 files). Trees in other folders with the same bytes share results.

Layout: ``CACHE/verify/STATIC-FILES.json``, plain JSON, never executed. A record that
does not parse or has the wrong shape is ignored (the suite runs and writes a new one).
Hand-written (a few dozen lines of hashing and JSON): no library keys test results by
the code a run imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The shape of a record; another one is ignored.
FORMAT = 1
FOLDER = "verify"
#: Packages whose version is an input.
_PACKAGES = ("torch", "triton", "pytest", "numpy", "pytest-xdist", "bakery")
#: Environment variables whose value is an input.
_ENV = re.compile(r"^(TRITON_|PYTEST_|BAKERY_RANK_|CUDA_VISIBLE_DEVICES$)")
_SKIP_DIRS = {"__pycache__", ".pytest_cache"}
_HEX = re.compile(r"[0-9a-f]{64}")
#: A recorded tree file: a module's file under vllm/ (nothing outside the tree is read).
_MODULE_FILE = re.compile(r"vllm(/[A-Za-z_][A-Za-z0-9_]*)*(/__init__)?\.py")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _files(folder: Path, *, recursive: bool) -> dict[str, str]:
    """sha256 of every regular file under ``folder`` (relative posix path -> hex)."""
    out: dict[str, str] = {}
    if not folder.is_dir():
        return out
    found = folder.rglob("*") if recursive else folder.iterdir()
    for p in sorted(found):
        rel = p.relative_to(folder)
        if any(part in _SKIP_DIRS for part in rel.parts) or p.suffix == ".pyc":
            continue
        if p.is_file() and not p.is_symlink():
            out[rel.as_posix()] = _digest(p.read_bytes())
    return out


def _file_digest(path: str) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:  # hashlib.file_digest is Python 3.11+
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


def tree_digest(tree: Path) -> str:
    """sha256 over every file of the tree (relative path, bytes; a link's target), in a
    stable order; ``.git``, ``__pycache__`` and ``*.pyc`` left out."""
    h = hashlib.sha256()
    for folder, dirs, names in os.walk(tree):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and d != ".git")
        for name in sorted(names):
            if name.endswith(".pyc"):
                continue
            p = os.path.join(folder, name)
            rel = os.path.relpath(p, tree).encode("utf-8", "surrogateescape")
            try:
                if os.path.islink(p):
                    what = b"link:" + os.readlink(p).encode("utf-8", "surrogateescape")
                else:
                    what = _file_digest(p)
            except OSError as e:
                what = f"unreadable:{e.errno}".encode()
            h.update(rel + b"\0" + what + b"\0")
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


def inputs(
    tests_dir: Path,
    tree: Path,
    *,
    interpret: bool,
    pytest_args: Sequence[str],
    series_dir: Path | None,
    env: Mapping[str, str] | None = None,
    device_name: str | None = None,
    env_mode: str = "light",
    python: str | None = None,
) -> dict[str, Any]:
    """Everything but the loaded tree modules that a run's result depends on."""
    import bakery.testing
    from bakery.testing.expect import MANIFEST

    manifest = tree / MANIFEST
    env = os.environ if env is None else env
    return {
        "format": FORMAT,
        "tests": _files(tests_dir, recursive=True),
        "series": _files(series_dir, recursive=False) if series_dir is not None else {},
        "manifest": _digest(manifest.read_bytes()) if manifest.is_file() else None,
        "tree": tree_digest(tree),
        "bakery": _files(Path(bakery.testing.__file__).parent, recursive=False),
        "python": sys.version,
        # the test environment: light (bakery's) or full (vLLM's requirements, its own
        # interpreter; the environment's folder is keyed by its requirements)
        "env_mode": env_mode,
        "interpreter": python,
        "packages": {name: _version(name) for name in _PACKAGES},
        "device": device_name if device_name is not None else device(interpret),
        "interpret": interpret,
        "pytest_args": list(pytest_args),
        "env": {k: v for k, v in sorted(env.items()) if _ENV.match(k)},
    }


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
            p = tree / rel
            out[rel] = _digest(p.read_bytes()) if p.is_file() and not p.is_symlink() else None
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


def _valid(data: Any) -> bool:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return False
    files, result = data.get("files"), data.get("result")
    if not isinstance(files, dict) or not isinstance(result, dict):
        return False
    for rel, sha in files.items():
        if not _MODULE_FILE.fullmatch(str(rel)) or not (sha is None or _HEX.fullmatch(str(sha))):
            return False
    return all(isinstance(data.get(k), str) for k in ("key", "date", "tree"))


def lookup(root: Path, static: str, tree: Path) -> Record | None:
    """The record of ``static`` whose recorded tree files ``tree`` still has, if any."""
    folder = root / FOLDER
    if not folder.is_dir():
        return None
    for p in sorted(folder.glob(f"{static[:32]}-*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not _valid(data):
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
    """Record a finished run; its key (static key and loaded files' hashes)."""
    files = module_files(tree, module_names)
    fk = files_key(files)
    key = _digest(f"{static}:{fk}".encode())
    folder = root / FOLDER
    data = {
        "format": FORMAT,
        "key": key,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "tree": str(tree),
        "files": files,
        "result": result,
    }
    with contextlib.suppress(OSError):  # a read-only cache still verifies; it only forgets
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{static[:32]}-{fk[:32]}.json"
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, final)
    return key
