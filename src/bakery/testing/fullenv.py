"""The full test environment: vLLM's own runtime dependencies, so that a series' tests can
``import vllm.X`` for any pure-Python module of the baked tree (``bakery verify --env full``).

The light loader (:mod:`bakery.testing.loader`) runs a tree's files with nothing but
bakery's environment (torch, Triton): enough for kernels, not for ``vllm.sampling_params``
(msgspec, pydantic, ``vllm.config`` and transformers). This module makes the rest:

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
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bakery.errors import VerifyError
from bakery.sources.cache import Cache, discard

log = logging.getLogger(__name__)

#: The way environments are built; a new one gives new keys (old ones are rebuilt).
FORMAT = "1"
#: Never installed into a full environment: bakery's own torch and Triton serve the tests,
#: and these are built against one torch (each would pull another torch, on CUDA hosts
#: a multi-GB wheel). ``intel-openmp`` is the CPU torch's OpenMP runtime.
EXCLUDED = {
    "torch": "bakery's own torch serves the tests",
    "triton": "bakery's own Triton serves the tests",
    "torchaudio": "built against one torch: would replace bakery's",
    "torchvision": "built against one torch: would replace bakery's",
    "torchcodec": "built against one torch: would replace bakery's",
    "intel-openmp": "the CPU torch wheel's own runtime, not vLLM's",
}
#: What the tests of a full environment may rely on bakery to keep (pinned by constraints).
PINNED = ("torch", "triton")
_INSTALL_TIMEOUT = 3600


@dataclass
class Requirements:
    """What a tree asks for, as the environment will be built: ``kept`` lines go to the
    installer; ``dropped`` maps each line left out to why."""

    files: list[str]
    kept: list[str]
    dropped: dict[str, str] = field(default_factory=dict)


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


def _read_lines(path: Path, seen: set[Path]) -> list[str]:
    """A requirements file's requirement lines, ``-r`` followed (inside the same folder)."""
    if path in seen:
        return []
    seen.add(path)
    lines: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            name = line.split(None, 1)[1].strip()
            nested = (path.parent / name).resolve()
            if nested.parent != path.parent.resolve():
                raise VerifyError(f"{path}: -r {name} leaves the requirements folder")
            lines += _read_lines(nested, seen)
        elif line.startswith("-"):
            continue  # index options: bakery's index is pip's configuration
        else:
            lines.append(line)
    return lines


def requirements(tree: Path, *, cpu: bool) -> Requirements:
    """The tree's runtime requirements for this host (see the module docstring)."""
    folder = tree / "requirements"
    names = ["common.txt", *(["cpu.txt"] if cpu else [])]
    files = [folder / n for n in names]
    if not files[0].is_file():
        raise VerifyError(
            f"{tree}: no requirements/common.txt: the full environment needs a vLLM "
            "source tree that lists its requirements (use --env light)"
        )
    seen: set[Path] = set()
    lines: list[str] = []
    for f in files:
        if f.is_file():
            lines += _read_lines(f.resolve(), seen)
    result = Requirements(
        files=[f"requirements/{n}" for n in names if (folder / n).is_file()], kept=[]
    )
    for line in lines:
        why = _drop_reason(line)
        if why:
            result.dropped[line] = why
        elif line not in result.kept:
            result.kept.append(line)
    return result


def _drop_reason(line: str) -> str | None:
    try:
        req = Requirement(line)
    except InvalidRequirement as e:
        return f"not a requirement bakery reads ({e})"
    if req.marker is not None and not req.marker.evaluate():
        return "not for this host (its marker)"
    name = canonicalize_name(req.name)
    if name in EXCLUDED:
        return EXCLUDED[name]
    if req.url:
        return "a direct URL, not the package index"
    return None


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


def _installer(python: Path, index: str, constraints: Path, reqs: Path) -> list[str]:
    uv = shutil.which("uv") or _module_uv()
    if uv:
        return [
            uv, "pip", "install", "--python", str(python), "--index-url", index,
            "--constraints", str(constraints), "--requirements", str(reqs),
        ]  # fmt: skip
    return [
        str(python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
        "--index-url", index, "--constraint", str(constraints), "--requirement", str(reqs),
    ]  # fmt: skip


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


def _load_marker(marker: Path, prefix: Path) -> dict[str, object] | None:
    try:
        meta = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta if _python(prefix).exists() else None


def ensure(tree: Path, *, cpu: bool, cache: Cache | None = None) -> FullEnv:
    """The full environment for ``tree``'s requirements: from the cache, else built now."""
    cache = cache or Cache()
    reqs = requirements(tree, cpu=cpu)
    pinned = pins()
    if "torch" not in pinned:
        raise VerifyError("the full environment reuses bakery's torch: install bakery[kernels]")
    key = env_key(reqs, pinned)
    envs = cache.path("envs")
    prefix, marker = envs / key, envs / f"{key}.json"
    started = time.monotonic()
    with cache.lock(f"env-{key}"):
        meta = _load_marker(marker, prefix)
        if meta is not None:
            cache.touch(marker)
            return FullEnv(
                prefix, _python(prefix), key, False, time.monotonic() - started,
                _number(meta.get("size")), meta,
            )  # fmt: skip
        marker.unlink(missing_ok=True)
        if prefix.exists():
            discard(prefix)
        log.info(
            f"building the full test environment {key} (once; then cached)", extra={"event": "env"}
        )
        meta = _build(prefix, reqs, pinned, key)
        meta["seconds"] = round(time.monotonic() - started)
        tmp = marker.with_suffix(f".json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, marker)
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
        command = _installer(_python(work), index, constraints, wanted)
        if reqs.kept:
            _install(work, key, command)
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
    meta["size"] = _size(prefix)
    return meta


def _last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"(ERROR|error)\b", ln)]
    return (errors or lines or ["the installer failed without a word"])[-1][:300]


def _freeze(prefix: Path) -> list[str]:
    """``name==version`` of what the environment itself holds (not bakery's layer)."""
    from importlib import metadata

    found = []
    for dist in metadata.distributions(path=[str(_site_packages(prefix))]):
        name = dist.metadata["Name"]
        if name:
            found.append(f"{canonicalize_name(name)}=={dist.version}")
    return sorted(set(found))


def _install(work: Path, key: str, command: list[str]) -> None:
    """Run the installer; its output goes to ``bakery-install.log`` in the environment."""
    log.debug("full env %s: %s", key, " ".join(command))
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT, check=False,
        env={**os.environ, "PIP_REQUIRE_VIRTUALENV": "0"},
    )  # fmt: skip
    (work / "bakery-install.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        last = _last_error(proc.stdout + proc.stderr)
        raise VerifyError(f"the full test environment could not be installed: {last}")
