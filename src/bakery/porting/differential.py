"""Differential check: the same recorded inputs through the kernels of two baked trees.

A structured merge resolves more conflicts than a line merge and also makes more wrong
merges that raise no conflict. Verify checks the promises the tests state; this checks
what no test states: that a proposed port computes what the previous release's baked tree
computes, on the inputs the series records in ``launcher/SERIES/differential.py``:

    MODULE = "vllm.model_executor...."          # the module whose functions are compared
    def load(name) -> module                          # optional: how to load it (stand-ins)
    def cases(module) -> Iterable[tuple[str, Any]]:   # (case name, output tensors)

Each tree is loaded in its own process by bakery's loader (as verify loads it: package
``__init__`` files never run, stand-ins declared), the outputs are saved with
``torch.save`` and compared exactly (NaN equal to NaN). A difference is explained when
``launcher/SERIES/differential.toml`` names the case for the target release, with the
reason (a documented upstream change); any other difference keeps a proposal from being
accepted automatically.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bakery import process
from bakery.errors import VerifyError

CASES_FILE = "differential.py"
EXPLAINED_FILE = "differential.toml"


@dataclass(frozen=True)
class Difference:
    case: str
    detail: str
    #: The series' reason when it expects this difference on the target release.
    explained: str | None = None

    def line(self) -> str:
        why = f" (explained: {self.explained})" if self.explained else " (unexplained)"
        return f"{self.case}: {self.detail}{why}"


def record(tree: Path, cases_file: Path, out: Path, *, interpret: bool) -> None:
    """In a child process: load the tree's module and save every case's output."""
    from bakery.testing.loader import TREE_ENV

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", TREE_ENV: str(Path(tree).resolve())}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, "-m", "bakery.porting.differential", str(tree), str(cases_file)]
    proc = process.run([*cmd, str(out)], env=env)
    if proc.returncode != 0:
        raise VerifyError(
            f"differential check: the cases failed on {tree} (exit {proc.returncode}): "
            f"{process.tail(proc, 1)}"
        )


def _main(tree: str, cases_file: str, out: str) -> None:
    import torch

    from bakery.testing import compat, loader

    if compat.interpret_mode():
        compat.fix_triton_interpreter()
    loader.install(tree)
    spec = importlib.util.spec_from_file_location("bakery_differential_cases", cases_file)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {cases_file}")
    cases = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = cases
    spec.loader.exec_module(cases)
    # a series whose module needs stand-ins declares them in its own load()
    load = getattr(cases, "load", importlib.import_module)
    module = load(cases.MODULE)
    results: dict[str, Any] = {}
    for name, output in cases.cases(module):
        results[name] = output
    torch.save(results, out)


def _same(a: Any, b: Any) -> str | None:
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
        if torch.equal(a, b) or (
            a.is_floating_point()
            and torch.equal(a.isnan(), b.isnan())
            and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))
        ):
            return None
        ne = (a != b) & ~(a.isnan() & b.isnan()) if a.is_floating_point() else a != b
        return f"{int(ne.sum())} of {a.numel()} values differ"
    if isinstance(a, tuple | list) and isinstance(b, tuple | list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if (why := _same(x, y)) is not None:
                return f"[{i}] {why}"
        return None
    return None if a == b else f"{a!r} vs {b!r}"


def compare(before: Path, after: Path, explained: dict[str, str]) -> list[Difference]:
    """Every case whose output differs (or is missing on one side)."""
    import torch

    a = torch.load(before, weights_only=True)
    b = torch.load(after, weights_only=True)
    out = []
    for case in sorted(set(a) | set(b)):
        if case not in a or case not in b:
            detail = "only in the proposal" if case not in a else "missing in the proposal"
        elif (why := _same(a[case], b[case])) is None:
            continue
        else:
            detail = why
        out.append(Difference(case, detail, explained.get(case)))
    return out


def explained_for(series_dir: Path, release: str) -> dict[str, str]:
    """The differences the series expects on a release: {case: reason}."""
    path = series_dir / EXPLAINED_FILE
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise VerifyError(f"{path}: {e}") from None
    section = data.get("release", {}).get(release, {})
    if not isinstance(section, dict) or not all(isinstance(v, str) for v in section.values()):
        raise VerifyError(f'{path}: [release."{release}"] must map case names to reasons')
    return dict(section)


if __name__ == "__main__":
    _main(*sys.argv[1:4])
