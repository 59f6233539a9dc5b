"""The core of ``bakery verify``: run a series' bundled tests against a baked tree.

pytest runs in a subprocess so that its environment (``TRITON_INTERPRET=1``,
``BAKERY_TREE``) is in place before anything imports Triton, and so that the tree's
modules never enter bakery's own process. pytest prints its own progress; the
counts and where each ``vllm.*`` module came from come back through the plugin's
JSON report. Nothing here prints or exits.

With ``jobs`` above 1 and pytest-xdist installed, the tests spread over that many
worker processes (``--dist loadgroup``: the plugin keeps every multi-rank test on one
worker, so that one set of rank processes serves them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import VerifyError
from bakery.testing import expect
from bakery.testing.loader import ROOT_PACKAGE, TREE_ENV

PLUGIN = "bakery.testing.plugin"

#: pytest's exit codes (pytest.ExitCode), kept here to not import pytest for them.
_PYTEST_OK, _PYTEST_FAILED, _PYTEST_INTERRUPTED, _PYTEST_NO_TESTS = 0, 1, 2, 5
_PYTEST_TROUBLE = {_PYTEST_INTERRUPTED: "interrupted", 3: "internal error", 4: "usage error"}


@dataclass(frozen=True)
class ModuleOrigin:
    """Where a ``vllm.*`` module of the test run came from."""

    name: str
    kind: str  # "tree" | "stand-in" | "package"
    detail: str


@dataclass(frozen=True)
class VerifyResult:
    #: 0: every test passed; 1: a test failed or errored, or none ran.
    exit_code: int
    pytest_exit_code: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    modules: tuple[ModuleOrigin, ...] = ()
    #: Fixes bakery applied to the test tools (not the tree), e.g. Triton's interpreter.
    tool_fixes: tuple[str, ...] = ()
    #: Registered defects of the series that this bake has: id -> tests that hit it
    #: (strict expected failures; neither passed nor failed).
    known_defects: dict[str, int] = field(default_factory=dict)
    #: Skips that the release's expectations do not list (counted in ``failed`` too).
    unexpected_skips: int = 0
    #: The release the expectations came from (None: the series has none for this bake).
    expectations: str | None = None
    #: pytest-xdist workers (1: one process).
    jobs: int = 1
    elapsed: float = 0.0
    junit: Path | None = None
    command: tuple[str, ...] = field(default=(), repr=False)
    #: verify --pristine: how the tests split between the baked and the pristine tree
    pristine: tuple[str, ...] = ()

    @property
    def no_tests(self) -> bool:
        return self.pytest_exit_code == _PYTEST_NO_TESTS

    @property
    def from_tree(self) -> tuple[ModuleOrigin, ...]:
        return tuple(m for m in self.modules if m.kind == "tree")

    @property
    def stood_in(self) -> tuple[ModuleOrigin, ...]:
        return tuple(m for m in self.modules if m.kind == "stand-in")


def pytest_command(
    tests_dir: Path,
    tree: Path,
    *,
    interpret: bool,
    pytest_args: Sequence[str] = (),
    junit: Path | None = None,
    report: Path | None = None,
    python: str | None = None,
    empty_ini: Path | None = None,
    series_dir: Path | None = None,
    jobs: int = 1,
) -> list[str]:
    """The pytest command line that :func:`run_verify` runs (for display, too).

    The tests folder's own ``pytest.ini`` is the only pytest configuration: without
    one, ``empty_ini`` stands in, so that no configuration of a folder above (bakery's
    own ``pyproject.toml``, say) changes how the bundled tests run."""
    command = [python or sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider"]
    ini = tests_dir / "pytest.ini"
    if ini.is_file() or empty_ini is not None:
        command.append(f"-c={ini if ini.is_file() else empty_ini}")
    # ``--opt=value``: a separate value would count as a path when pytest picks its rootdir.
    command += [f"--rootdir={tests_dir}", f"--bakery-tree={tree}"]
    if interpret:
        command.append("--bakery-interpret")
    if report is not None:
        command.append(f"--bakery-report={report}")
    if series_dir is not None:
        command.append(f"--bakery-series={series_dir}")
    if jobs > 1:
        command += [f"--numprocesses={jobs}", "--dist=loadgroup"]
    if junit is not None:
        command.append(f"--junitxml={junit}")
    command += [*pytest_args, str(tests_dir)]
    return command


def verify_environment(
    tree: Path, *, interpret: bool, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The subprocess environment: the tree, and Triton's interpreter on or off."""
    env = dict(os.environ if base is None else base)
    env[TREE_ENV] = str(tree)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def check_inputs(tests_dir: Path, tree: Path, interpret: bool) -> None:
    if not tests_dir.is_dir():
        raise VerifyError(f"no bundled tests: {tests_dir} is not a folder")
    if not any(tests_dir.glob("test_*.py")) and not any(tests_dir.glob("*_test.py")):
        raise VerifyError(f"no bundled tests: {tests_dir} holds no test_*.py")
    if not tree.is_dir():
        raise VerifyError(f"no baked tree at {tree}")
    if not (tree / ROOT_PACKAGE).is_dir():
        raise VerifyError(f"{tree} is not a vLLM tree (no {ROOT_PACKAGE}/ folder)")
    if not interpret and not cuda_available():
        raise VerifyError(
            "no CUDA GPU is visible to torch; use --interpret to run the kernels on CPU"
        )


def _checked_args(tree: Path, series_dir: Path | None, pytest_args: Sequence[str]) -> list[str]:
    """``pytest_args`` once the series' rules apply to the tree (else VerifyError, one
    line), with the cached pristine tree of its release unless one is named."""
    if series_dir is not None:
        why = expect.no_rules(Path(series_dir), tree, named_rules(pytest_args))
        if why:
            raise VerifyError(why)
    args = list(pytest_args)
    if not any(a.startswith("--bakery-pristine") for a in args):
        pristine = cached_pristine(tree)
        if pristine is not None:
            args.append(f"--bakery-pristine={pristine}")
    return args


def cached_pristine(tree: Path) -> Path | None:
    """The pristine tree of the bake's release in bakery's cache, where it is intact."""
    release = expect.Bake.of(tree).release
    if release is None:
        return None
    from bakery.errors import SourceError
    from bakery.sources.cache import Cache

    cache = Cache()
    key = f"vllm-{release}"
    if not (cache.root / "trees" / f"{key}.json").is_file():
        return None
    try:
        with cache.lock(key):
            entry = cache.tree_entry(key)
    except SourceError:
        return None
    return entry.tree if entry is not None and (entry.tree / ROOT_PACKAGE).is_dir() else None


def named_rules(pytest_args: Sequence[str]) -> str | None:
    """The release named with ``--bakery-rules`` among the pytest arguments."""
    for n, arg in enumerate(pytest_args):
        if arg == "--bakery-rules" and n + 1 < len(pytest_args):
            return pytest_args[n + 1]
        if arg.startswith("--bakery-rules="):
            return arg.split("=", 1)[1]
    return None


def cuda_available() -> bool:
    try:
        import torch
    except ImportError as exc:
        raise VerifyError(f"torch is not installed ({exc}); install bakery[kernels]") from None
    return bool(torch.cuda.is_available())


def default_jobs(interpret: bool) -> int:
    """Workers for a verify run: the cores, up to 4, under the interpreter (CPU-bound);
    one on a GPU (the ranks already hold the GPUs); one without pytest-xdist."""
    if not interpret or importlib.util.find_spec("xdist") is None:
        return 1
    return max(1, min(os.cpu_count() or 1, 4))


def run_verify(
    tests_dir: Path,
    tree: Path,
    *,
    interpret: bool,
    pytest_args: Sequence[str] = (),
    junit: Path | None = None,
    python: str | None = None,
    log: Path | None = None,
    series_dir: Path | None = None,
    jobs: int | None = None,
) -> VerifyResult:
    """Run the tests in ``tests_dir`` against ``tree``; pytest prints as it goes.

    ``pytest_args`` go to pytest before the tests folder; with ``log``, pytest's output
    goes to that file instead of the terminal (parallel matrix workers). Raises
    :class:`~bakery.errors.VerifyError` for bad input (no tests folder, no tree, no
    GPU without ``interpret``) and when pytest itself cannot run (usage or internal
    error, interrupted); a test that fails, or no test at all, is ``exit_code`` 1.
    ``series_dir``: the series' data (known defects, expectations per release);
    ``jobs``: pytest-xdist workers (default :func:`default_jobs`).
    """
    tests_dir, tree = Path(tests_dir).resolve(), Path(tree).resolve()
    check_inputs(tests_dir, tree, interpret)
    pytest_args = _checked_args(tree, series_dir, pytest_args)
    if jobs is None:
        # -x / --maxfail stop the run at a failure: one worker, so that the stop is a
        # failed run (exit 1), not an interrupted one (pytest-xdist's stop exits 2)
        stops = any(a in ("-x", "--exitfirst") or a.startswith("--maxfail") for a in pytest_args)
        jobs = 1 if stops else default_jobs(interpret)
    elif jobs > 1 and importlib.util.find_spec("xdist") is None:
        raise VerifyError("--jobs needs pytest-xdist: install bakery[kernels]")
    junit = Path(junit).resolve() if junit is not None else None
    with tempfile.TemporaryDirectory(prefix="bakery-verify-") as tmp:
        report = Path(tmp) / "report.json"
        empty_ini = Path(tmp) / "pytest.ini"
        empty_ini.write_text("[pytest]\n")
        command = pytest_command(
            tests_dir,
            tree,
            interpret=interpret,
            pytest_args=pytest_args,
            junit=junit,
            report=report,
            python=python,
            empty_ini=empty_ini,
            series_dir=Path(series_dir).resolve() if series_dir is not None else None,
            jobs=jobs,
        )
        started = time.monotonic()
        try:
            env = verify_environment(tree, interpret=interpret)
            if log is None:
                code = subprocess.run(command, env=env, check=False).returncode
            else:
                with open(log, "wb") as sink:
                    code = subprocess.run(
                        command, env=env, check=False, stdout=sink, stderr=subprocess.STDOUT
                    ).returncode
        except OSError as exc:
            raise VerifyError(f"cannot start pytest: {exc}") from None
        elapsed = time.monotonic() - started
        data = json.loads(report.read_text()) if report.is_file() else None
    counts = (data or {}).get("counts", {})
    # pytest stops with "interrupted" on collection errors: a test module that cannot
    # import the tree's code is a failed test, not a usage error.
    collection_failed = code == _PYTEST_INTERRUPTED and counts.get("error", 0) > 0
    if code in _PYTEST_TROUBLE and not collection_failed:
        raise VerifyError(f"pytest stopped: {_PYTEST_TROUBLE[code]} (exit code {code})")
    if code not in (_PYTEST_OK, _PYTEST_FAILED, _PYTEST_NO_TESTS) and not collection_failed:
        raise VerifyError(f"pytest exited with code {code}")
    return VerifyResult(
        exit_code=0 if code == _PYTEST_OK else 1,
        pytest_exit_code=code,
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        errors=counts.get("error", 0),
        skipped=counts.get("skipped", 0),
        xfailed=counts.get("xfailed", 0),
        xpassed=counts.get("xpassed", 0),
        modules=tuple(ModuleOrigin(**m) for m in (data or {}).get("modules", [])),
        tool_fixes=tuple((data or {}).get("tool_fixes", [])),
        known_defects=dict((data or {}).get("known_defects", {})),
        unexpected_skips=int((data or {}).get("unexpected_skips", 0)),
        expectations=(data or {}).get("expectations"),
        jobs=jobs,
        elapsed=elapsed,
        junit=junit,
        command=tuple(command),
    )
