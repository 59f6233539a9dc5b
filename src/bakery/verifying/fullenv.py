"""The full test environment: vLLM's own runtime dependencies, so that a series' tests can
``import vllm.X`` for any pure-Python module of the baked tree (``bakery verify --env full``).

The light loader (:mod:`bakery.testing.loader`) runs a tree's files with nothing but
bakery's environment (torch, Triton): enough for kernels, not for ``vllm.sampling_params``
(pydantic, ``vllm.config`` and transformers). This module makes the rest:

- one virtual environment per set of requirements, in bakery's cache
  (``envs/<key>/``; the key hashes the requirements, the Python and the platform, and the
  torch and Triton that bakery runs), built once, then reused offline;
- the requirements are the tree's ``requirements/common.txt`` (with ``cpu.txt`` on a host
  without a CUDA GPU), minus what bakery's environment already provides and must never be
  replaced: torch and Triton and the packages built against one torch (``EXCLUDED``), and
  direct URL requirements (a wheel named by URL is not from the index);
- the environment is *layered* on bakery's: a ``.pth`` file adds bakery's site-packages
  after the environment's own (as ``--system-site-packages`` does), so that bakery's torch
  and Triton are the ones the tests import, and the installer sees them as installed. A
  constraints file pins torch and Triton to the versions bakery runs: a requirement that
  wants another torch fails the build (one line) instead of pulling a multi-GB CUDA
  wheel;
- the installer is uv when it is installed (``bakery[fullenv]``), else pip (bakery's own,
  run by the new environment's interpreter through the layer). The index is the one
  :mod:`bakery.sources.pipconf` finds, as for the vLLM sources; pip adds its own
  configuration's extra indexes and find-links, as ``pip install`` does.

The build happens in a temporary folder beside its place, under the key's lock, and is
renamed into place; ``envs/<key>.json``, written last, says it is complete, with what was
asked, what was left out and why, what got installed (``pip freeze``), the time and the
size. Nothing here prints: progress goes to ``logging``.

What the build may run, and what is checked before the environment's interpreter runs
(SECURITY.md, "The full test environment"):

- the installer takes wheels only (``--only-binary :all:``): no PEP 517 backend, no
  ``setup.py`` from the index runs; the index's credentials reach it through its
  environment (``PIP_INDEX_URL``, ``UV_INDEX_URL``), never its argv, and every error line
  is redacted;
- the requirements are read from regular files inside the tree only (never a link), and a
  malformed one is one line that names the file and line (no traceback, no secret);
- the marker holds the environment's *inventory*, made after the build: every folder,
  every link and its target (the venv's ``bin/python``), and every file's size and
  sha256, sealed by :mod:`bakery.safety.seal` (an HMAC under the user's key, kept
  outside the cache; the installer compiles the byte code, so that running the tests
  writes nothing new there). Before each use the marker's seal is checked and the
  folder is walked (never following a link): the folder itself may not be a link;
  nothing may be added (a ``.pth`` file or a ``__pycache__`` entry the installer did
  not write), removed, or turned into a link; a link may not point elsewhere; and a
  file whose size, inode or ctime changed since it was hashed (a write or a
  replacement changes its ctime, which the user cannot set) is hashed again and must
  match. ``.pth`` files and ``pyvenv.cfg`` are hashed every time. An environment that
  fails is removed (a link itself, never what it names) and built again, and bakery
  says why once (a warning).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import site
import stat
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from bakery import process
from bakery.errors import VerifyError
from bakery.outputs import replace_bytes
from bakery.redaction import redact_text, split_userinfo
from bakery.safety import cachepolicy, seal
from bakery.safety.limits import MiB
from bakery.safety.text import clean
from bakery.sources.cache import Cache, discard
from bakery.verifying.requirements import Requirements, requirements

log = logging.getLogger(__name__)

#: The way environments are built; a new one gives new keys (old ones are rebuilt).
#: 2: wheels only, byte code compiled at build, the marker holds a MACed inventory.
FORMAT = "2"
#: What the tests of a full environment may rely on bakery to keep (pinned by constraints).
PINNED = ("torch", "triton")
_INSTALL_TIMEOUT = 3600
#: The marker: a few hundred bytes per file of the environment (about 30 000 files).
MAX_MARKER = 64 * MiB
#: One file of an environment hashed before use (the largest wheels' libraries).
MAX_ENV_FILE = 4096 * MiB
#: Files hashed at every use, whatever their stat says: what Python runs at start-up.
_ALWAYS_HASHED = (".pth",)
_ALWAYS_HASHED_NAMES = ("pyvenv.cfg", "sitecustomize.py", "usercustomize.py")


@dataclass(frozen=True)
class FullEnv:
    path: Path
    python: Path
    key: str
    #: True when this call built it (first use); False: found in the cache.
    built: bool
    seconds: float
    size: int
    meta: dict[str, object]


def pins() -> dict[str, str]:
    """The versions of torch and Triton that bakery runs (PINNED), as installed."""
    from importlib import metadata

    found = {}
    for name in PINNED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def env_key(reqs: Requirements, pinned: dict[str, str]) -> str:
    data = {
        "format": FORMAT,
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "platform": f"{sys.platform}-{platform.machine()}",
        "base": sys.base_prefix,
        "layer": _layer_line(),
        "requirements": sorted(reqs.kept),
        "pins": pinned,
    }
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return f"py{sys.version_info[0]}{sys.version_info[1]}-{digest[:16]}"


def _site_packages(prefix: Path) -> Path:
    if sys.platform == "win32":  # pragma: no cover
        return prefix / "Lib" / "site-packages"
    return prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def _python(prefix: Path) -> Path:
    if sys.platform == "win32":  # pragma: no cover
        return prefix / "Scripts" / "python.exe"
    return prefix / "bin" / "python"


def _layer_line() -> str:
    """The ``.pth`` line that adds bakery's environment after the new one's own packages
    (``site.addsitedir``: its own ``.pth`` files, an editable bakery, are read too)."""
    dirs = [d for d in site.getsitepackages() if Path(d).is_dir()]
    calls = "; ".join(f"site.addsitedir({d!r})" for d in dirs)
    return f"import site; {calls}\n"


def _installer(python: Path, constraints: Path, reqs: Path) -> list[str]:
    """The installer's argv: wheels only, and no index in it (the index, which may carry
    a password, goes through the child's environment: :func:`_child_env`)."""
    uv = shutil.which("uv") or _module_uv()
    if uv:
        return [
            uv, "pip", "install", "--python", str(python), "--only-binary", ":all:",
            "--compile-bytecode", "--constraints", str(constraints), "--requirements", str(reqs),
        ]  # fmt: skip
    return [
        str(python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--only-binary", ":all:", "--constraint", str(constraints), "--requirement", str(reqs),
    ]  # fmt: skip


def _child_env(index: str) -> dict[str, str]:
    """The installer's environment: the index (credentials and all) as pip and uv read it
    from their own variables, where ``ps`` does not show it (``/proc/PID/environ`` is the
    user's own, as the pip.conf that may hold the same password)."""
    env = {k: v for k, v in os.environ.items() if k not in ("UV_DEFAULT_INDEX", "UV_INDEX_URL")}
    env.update(PIP_INDEX_URL=index, UV_INDEX_URL=index, PIP_REQUIRE_VIRTUALENV="0")
    env["PIP_ONLY_BINARY"] = ":all:"
    return env


def _module_uv() -> str | None:
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return str(find_uv_bin())


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total


# --- the marker's seal -------------------------------------------------------------------------

#: The seal's kind for a full environment's marker (bakery.safety.seal).
SEAL_KIND = "fullenv-marker"


def _sealed(meta: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in meta.items() if k != "mac"}


# --- the inventory --------------------------------------------------------------------------------

#: One entry of an inventory: ["d"], ["l", target], or ["f", size, sha256, inode, ctime_ns].
Entry = list[object]


class Tampered(Exception):
    """The environment on disk is not the one its marker describes (the reason)."""


def _walk(prefix: Path) -> dict[str, os.stat_result]:
    """Every entry under prefix (relative POSIX path -> lstat), never following a link.
    ``os.scandir`` by hand: a vLLM environment holds some 30 000 entries, walked before
    every use, and pathlib per entry costs several times the lstat itself."""
    found: dict[str, os.stat_result] = {}
    pending = [("", str(prefix))]
    while pending:
        rel, folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = f"{rel}{entry.name}"
                    st = entry.stat(follow_symlinks=False)
                    found[name] = st
                    if stat.S_ISDIR(st.st_mode):
                        pending.append((f"{name}/", entry.path))
        except OSError as e:
            raise Tampered(f"{clean(rel or '.')} cannot be read ({e.strerror})") from None
    return found


def _hash(path: Path) -> str:
    try:
        return cachepolicy.sha256(path, MAX_ENV_FILE, "environment file")
    except (OSError, cachepolicy.CacheRefused) as e:
        raise Tampered(f"{path.name} cannot be hashed ({e})") from None


def inventory(prefix: Path) -> dict[str, Entry]:
    """What a built environment holds (see the module docstring)."""
    entries: dict[str, Entry] = {}
    for rel, st in _walk(prefix).items():
        if stat.S_ISDIR(st.st_mode):
            entries[rel] = ["d"]
        elif stat.S_ISLNK(st.st_mode):
            entries[rel] = ["l", os.readlink(prefix / rel)]
        elif stat.S_ISREG(st.st_mode):
            digest = _hash(prefix / rel)
            entries[rel] = ["f", st.st_size, digest, st.st_ino, st.st_ctime_ns]
        else:
            raise Tampered(f"{rel} is not a file, folder or link")
    return entries


def _always_hashed(rel: str) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(_ALWAYS_HASHED) or name in _ALWAYS_HASHED_NAMES


def check_inventory(prefix: Path, recorded: dict[str, Entry]) -> bool:
    """Tampered (the first difference) unless prefix holds what ``recorded`` says; True
    when a file was hashed again and matched (its stat changed: a restored cache), so
    that the caller records the new stat."""
    st = os.lstat(prefix) if os.path.lexists(prefix) else None
    if st is None or not stat.S_ISDIR(st.st_mode):
        raise Tampered("its folder is a link or not a folder" if st else "its folder is missing")
    found = _walk(prefix)
    added = sorted(set(found) - set(recorded))
    if added:
        what = "a .pth file" if added[0].endswith(".pth") else "a file"
        raise Tampered(f"{what} its installer did not write: {clean(added[0])}")
    missing = sorted(set(recorded) - set(found))
    if missing:
        raise Tampered(f"{clean(missing[0])} is missing")
    restated = False
    for rel, entry in recorded.items():
        restated = _check_entry(prefix, rel, entry, found[rel]) or restated
    return restated


def _check_entry(prefix: Path, rel: str, entry: Entry, now: os.stat_result) -> bool:
    """Tampered unless the entry at rel is as recorded; True when its stat was updated."""
    kind = entry[0]
    if kind == "d":
        if not stat.S_ISDIR(now.st_mode):
            raise Tampered(f"{clean(rel)} is no longer a folder")
        return False
    if kind == "l":
        if not stat.S_ISLNK(now.st_mode) or os.readlink(prefix / rel) != entry[1]:
            raise Tampered(f"{clean(rel)} is not the link its installer made")
        return False
    if not stat.S_ISREG(now.st_mode) or now.st_size != entry[1]:
        raise Tampered(f"{clean(rel)} is not the file its installer wrote")
    same_stat = [now.st_ino, now.st_ctime_ns] == entry[3:5]
    if same_stat and not _always_hashed(rel):
        return False
    if _hash(prefix / rel) != entry[2]:
        raise Tampered(f"{clean(rel)} was changed since it was installed")
    entry[3:5] = [now.st_ino, now.st_ctime_ns]
    return not same_stat


def _write_marker(marker: Path, meta: dict[str, object]) -> None:
    meta["mac"] = seal.seal_json(SEAL_KIND, _sealed(meta))
    replace_bytes(marker, (json.dumps(meta, indent=1, sort_keys=True) + "\n").encode())


def _trusted(marker: Path, prefix: Path) -> tuple[dict[str, object] | None, str]:
    """(the marker's data, "") when the environment may run; (None, why) when it must be
    built (why is "" where there was simply none, or one of an older format)."""
    if not os.path.lexists(marker) and not os.path.lexists(prefix):
        return None, ""
    try:
        meta = json.loads(cachepolicy.read_text(marker, MAX_MARKER, "environment marker"))
    except FileNotFoundError:
        return None, "its marker is missing"
    except (OSError, ValueError, cachepolicy.CacheRefused) as e:
        return None, f"its marker cannot be read ({clean(e)[:200]})"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None, ""  # an older format: its key differs, this is a leftover
    if not seal.valid_json(SEAL_KIND, _sealed(meta), meta.get("mac")):
        return None, "its marker's MAC does not match (not written by bakery on this machine)"
    recorded = meta.get("inventory")
    if not isinstance(recorded, dict):
        return None, "its marker holds no inventory"
    try:
        if check_inventory(prefix, recorded):
            _write_marker(marker, meta)
    except Tampered as e:
        return None, str(e)
    return meta, ""


def ensure(tree: Path, *, cpu: bool, cache: Cache | None = None) -> FullEnv:
    """The full environment for ``tree``'s requirements: from the cache once its files
    are checked (see the module docstring), else built now."""
    cache = cache or Cache()
    reqs = requirements(tree, cpu=cpu)
    pinned = pins()
    if "torch" not in pinned:
        raise VerifyError("the full environment reuses bakery's torch: install bakery[kernels]")
    key = env_key(reqs, pinned)
    envs = cache.path("envs")
    prefix, marker = envs / key, envs / f"{key}.json"
    started = time.monotonic()
    seal.key()  # SealUnavailable (one line) where this user's key cannot be trusted
    with cache.lock(f"env-{key}"):
        meta, why = _trusted(marker, prefix)
        if meta is not None:
            cache.touch(marker)
            return FullEnv(
                prefix, _python(prefix), key, False, time.monotonic() - started,
                _number(meta.get("size")), meta,
            )  # fmt: skip
        if why:
            note = f"the cached full test environment {key} is not used ({why}); building it again"
            log.warning(note, extra={"event": "env"})  # the one place it is said
        cachepolicy.remove(marker)
        cachepolicy.remove(prefix)
        log.info(  # loud: minutes, said even inside a matrix row's muted work
            f"building the full test environment {key} (once; then cached)",
            extra={"event": "env", "loud": True},
        )
        meta = _build(prefix, reqs, pinned, key)
        meta["seconds"] = round(time.monotonic() - started)
        _write_marker(marker, meta)
    return FullEnv(
        prefix, _python(prefix), key, True, float(_number(meta.get("seconds"))),
        _number(meta.get("size")), meta,
    )  # fmt: skip


def _number(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


def _build(prefix: Path, reqs: Requirements, pinned: dict[str, str], key: str) -> dict[str, object]:
    from bakery.sources.pipconf import configured_index

    index = configured_index().url
    work = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=prefix.parent))
    try:
        venv.EnvBuilder(with_pip=False, symlinks=sys.platform != "win32").create(work)
        (_site_packages(work) / "_bakery_layer.pth").write_text(_layer_line())
        constraints = work / "bakery-constraints.txt"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pinned.items())))
        wanted = work / "bakery-requirements.txt"
        wanted.write_text("".join(line + "\n" for line in reqs.kept))
        command = _installer(_python(work), constraints, wanted)
        if reqs.kept:
            _install(work, key, command, index)
        meta: dict[str, object] = {
            "format": FORMAT,
            "key": key,
            "requirements_files": reqs.files,
            "requirements": reqs.kept,
            "left_out": reqs.dropped,
            "pins": pinned,
            "installer": Path(command[0]).name if "uv" in Path(command[0]).name else "pip",
            "installed": _freeze(work),
        }
        os.replace(work, prefix)
    except subprocess.TimeoutExpired:
        raise VerifyError(
            f"the full test environment took over {_INSTALL_TIMEOUT} s to install"
        ) from None
    finally:
        if work.exists():
            discard(work)
    try:
        meta["inventory"] = inventory(prefix)
    except Tampered as e:
        cachepolicy.remove(prefix)
        raise VerifyError(f"the full test environment {key} just built: {e}") from None
    meta["size"] = _size(prefix)
    return meta


#: How an installer starts the line that gives an error's reason (uv: ``cause:``, older
#: uv: ``Caused by:`` or an arrow).
_CAUSE = re.compile(r"(cause:|Caused by:|\u2570\u2500\u25b6)\s*")


def _last_error(output: str, index: str) -> str:
    """The installer's last error line (pip: ``ERROR: ...``), with its first cause where
    the installer gives the reason on the next line (uv: ``error: No solution found`` then
    ``cause: Because ...``)."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    at = [i for i, ln in enumerate(lines) if re.match(r"(ERROR|error)\b", ln)]
    if not at:
        return clean(redact_text((lines or ["the installer failed without a word"])[-1], index))
    last = lines[at[-1]]
    following = lines[at[-1] + 1] if at[-1] + 1 < len(lines) else ""
    cause = _CAUSE.match(following)
    if cause:
        last = f"{last}: {following[cause.end() :]}"
    return clean(redact_text(last, index))[:300]


def _freeze(prefix: Path) -> list[str]:
    """``name==version`` of what the environment itself holds (not bakery's layer)."""
    from importlib import metadata

    found = []
    for dist in metadata.distributions(path=[str(_site_packages(prefix))]):
        name = dist.metadata["Name"]
        if name:
            found.append(f"{canonicalize_name(name)}=={dist.version}")
    return sorted(set(found))


def _install(work: Path, key: str, command: list[str], index: str) -> None:
    """Run the installer; its output (redacted) goes to ``bakery-install.log`` in the
    environment."""
    log.debug("full env %s: %s (index %s)", key, " ".join(command), split_userinfo(index)[0])
    proc = process.run(command, timeout=_INSTALL_TIMEOUT, env=_child_env(index))
    output = redact_text((proc.stdout + proc.stderr).decode(errors="replace"), index)
    (work / "bakery-install.log").write_text(output)
    if proc.returncode != 0:
        raise VerifyError(
            f"the full test environment could not be installed: {_last_error(output, index)}"
        )
