"""What a tree asks the full test environment for (:mod:`bakery.verifying.fullenv`): its
``requirements/common.txt`` (with ``cpu.txt`` on a host without a CUDA GPU), read only
from regular files inside the tree, a malformed line one error naming the file and line,
minus what bakery's own environment provides and must never be replaced (``EXCLUDED``)
and direct URL requirements."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from bakery.errors import VerifyError
from bakery.safety import cachepolicy
from bakery.safety.limits import MiB
from bakery.safety.text import clean

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


#: A requirements file larger than this is refused (vLLM's are a few KB).
MAX_REQUIREMENTS = 1 * MiB


@dataclass
class Requirements:
    """What a tree asks for, as the environment will be built: ``kept`` lines go to the
    installer; ``dropped`` maps each line left out to why."""

    files: list[str]
    kept: list[str]
    dropped: dict[str, str] = field(default_factory=dict)


def _regular_in_tree(tree: Path, path: Path, shown: str) -> None:
    """path is a regular file inside tree, reached through real folders only: a link (to a
    file, or a folder on the way) could make the tree's requirements name anything on the
    machine, and its lines would be sent to the index as package names."""
    if not path.is_relative_to(tree):
        raise VerifyError(f"{shown}: outside the tree; bakery reads requirements only there")
    if not cachepolicy.real_dir(tree, path.parent):
        raise VerifyError(f"{shown}: a folder on its way is a link; bakery does not follow it")
    st = os.lstat(path) if os.path.lexists(path) else None
    if st is None:
        raise VerifyError(f"{shown}: no such file in the tree")
    if stat.S_ISLNK(st.st_mode):
        raise VerifyError(f"{shown}: a symbolic link; bakery reads requirements from the tree only")
    if not stat.S_ISREG(st.st_mode):
        raise VerifyError(f"{shown}: not a regular file")


def _read_lines(tree: Path, path: Path, seen: set[Path]) -> list[tuple[str, str]]:
    """(where, line) of a requirements file's requirement lines, ``-r`` followed inside the
    same folder; ``where`` is ``requirements/NAME:LINE`` (errors name it, not the line)."""
    if path in seen:
        return []
    seen.add(path)
    shown = str(path)  # the tree is absolute: the message says which tree
    _regular_in_tree(tree, path, shown)
    try:
        data = cachepolicy.read_bytes(path, MAX_REQUIREMENTS, "requirements file")
    except OSError as e:
        raise VerifyError(f"{shown}: {e.strerror or 'cannot be read'}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise VerifyError(f"{shown}: not UTF-8 (byte {e.start})") from None
    lines: list[tuple[str, str]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{shown}:{number}"
        if line.startswith(("-r ", "--requirement ", "-r", "--requirement=")):
            name = re.sub(r"^(-r|--requirement)[ =]?", "", line).strip()
            nested = path.parent / name
            if (
                not name
                or "/" in name
                or os.sep in name
                or name in (".", "..")
                or nested.parent != path.parent
            ):
                raise VerifyError(f"{where}: -r {clean(name)} leaves the requirements folder")
            if not os.path.lexists(nested):
                raise VerifyError(f"{where}: -r {clean(name)}: no such file in the tree")
            lines += _read_lines(tree, nested, seen)
        elif line.startswith("-"):
            continue  # index options: bakery's index is pip's configuration
        else:
            lines.append((where, line))
    return lines


def requirements(tree: Path, *, cpu: bool) -> Requirements:
    """The tree's runtime requirements for this host (see the module docstring). A file
    bakery cannot read as requirements (a link, not UTF-8, a marker it cannot evaluate, a
    missing ``-r`` file) is one line (VerifyError) naming the file and line."""
    tree = Path(os.path.abspath(tree))
    folder = tree / "requirements"
    names = ["common.txt", *(["cpu.txt"] if cpu else [])]
    if not os.path.lexists(folder / names[0]):
        raise VerifyError(
            f"{tree}: no requirements/common.txt: the full environment needs a vLLM "
            "source tree that lists its requirements (use --env light)"
        )
    seen: set[Path] = set()
    lines: list[tuple[str, str]] = []
    present = [n for n in names if os.path.lexists(folder / n)]
    for name in present:
        lines += _read_lines(tree, folder / name, seen)
    result = Requirements(files=[f"requirements/{n}" for n in present], kept=[])
    for where, line in lines:
        why = _drop_reason(where, line)
        if why:
            result.dropped[line] = why
        elif line not in result.kept:
            result.kept.append(line)
    return result


def _drop_reason(where: str, line: str) -> str | None:
    try:
        req = Requirement(line)
    except InvalidRequirement as e:
        return f"not a requirement bakery reads ({clean(e)})"
    if req.marker is not None:
        try:
            applies = req.marker.evaluate()
        except Exception as e:  # packaging's UndefinedComparison, UndefinedEnvironmentName...
            raise VerifyError(
                f"{where}: a marker bakery cannot evaluate ({type(e).__name__}: {clean(e)[:200]})"
            ) from None
        if not applies:
            return "not for this host (its marker)"
    name = canonicalize_name(req.name)
    if name in EXCLUDED:
        return EXCLUDED[name]
    if req.url:
        return "a direct URL, not the package index"
    return None
