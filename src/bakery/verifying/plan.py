"""The verify plan: one frozen value that says everything a run of a series' tests
depends on, built one way for every command that runs them.

``bakery verify``, ``verify --pristine``, ``matrix --verify``, ``port`` (each candidate),
``port --update``, ``port --promote``, ``bisect --verify``, the unreleased-tree port and
``make mutants`` all call :func:`for_series` (or, for a tests folder without a series,
:func:`build`), and the runner (:func:`bakery.verifying.runner.run_verify`) takes the plan
and nothing else. So no path can forget the series' test environment, its data, the
device rule or the pristine oracle: each of those is decided here, once (issue 44: four
paths ran a series whose ``env = "full"`` in the light environment).

The order of the checks is the user's: bad input (no tests, no tree, no GPU) is one line
before an environment is built or anything runs.
"""

from __future__ import annotations

import enum
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bakery.errors import VerifyError
from bakery.testing import expect
from bakery.testing.loader import ROOT_PACKAGE
from bakery.verifying import environments
from bakery.verifying.environments import Prepared

if TYPE_CHECKING:
    from bakery.patch.series import Series
    from bakery.sources.cache import Cache


class Reuse(enum.Enum):
    """What the run does with bakery's record of earlier results (:mod:`bakery.testing.reuse`)."""

    #: an earlier result whose inputs all equal this run's is returned; a run is recorded
    REUSE = "reuse"
    #: the tests run (``--no-reuse``), and the result is recorded
    RECORD = "record"
    #: neither looked up nor recorded: a scratch tree no later run asks about (a mutant,
    #: the pristine half of ``verify --pristine``)
    OFF = "off"


@dataclass(frozen=True)
class VerifyOptions:
    """What the command line (or a command's own rule) chose; :func:`for_series` turns it
    and the series into a plan."""

    #: True: the CPU under Triton's interpreter; False: a GPU; None: a GPU when one is seen
    interpret: bool | None = None
    #: a test environment's name (``--env``); None: the series' ``env``, else the default
    env: str | None = None
    pytest_args: tuple[str, ...] = ()
    junit: Path | None = None
    #: pytest's output goes to this file instead of the terminal
    log: Path | None = None
    #: pytest-xdist workers; None: :func:`default_jobs`
    jobs: int | None = None
    reuse: Reuse = Reuse.REUSE
    #: the pristine tree the oracle tests compare with; None: the cached release's
    pristine: Path | None = None


@dataclass(frozen=True)
class VerifyPlan:
    """One run of a series' tests, fully decided (the runner's only input)."""

    tests: Path
    tree: Path
    interpret: bool
    #: where the tests run, in words (for the user)
    device: str = ""
    env: Prepared = field(default_factory=lambda: Prepared(environments.Light.name))
    #: pytest's arguments, the pristine oracle's included
    pytest_args: tuple[str, ...] = ()
    #: the series' folder (its data: known defects, expectations per release)
    series_dir: Path | None = None
    pristine: Path | None = None
    #: why the pristine oracle's tests do not run (no pristine tree, none to fetch)
    pristine_missing: str | None = None
    jobs: int = 1
    junit: Path | None = None
    log: Path | None = None
    reuse: Reuse = Reuse.OFF
    #: bakery's cache, where results are recorded (None with ``Reuse.OFF``)
    cache_root: Path | None = None


def for_series(
    series: Series, tree: Path, options: VerifyOptions, *, cache: Cache | None = None
) -> VerifyPlan:
    """The plan of a run of ``series``' tests against ``tree``: the one way every command
    decides the device, the test environment (``options.env``, else the series' own),
    the series' data, the pristine oracle, the workers and the reuse policy."""
    if series.tests is None:
        raise VerifyError(f"series {series.name} has no tests/ folder")
    return build(
        series.tests, tree, options, series_dir=series.path, series_env=series.env, cache=cache
    )


def build(
    tests: Path,
    tree: Path,
    options: VerifyOptions,
    *,
    series_dir: Path | None = None,
    series_env: str | None = None,
    cache: Cache | None = None,
) -> VerifyPlan:
    """:func:`for_series` for a tests folder, with or without its series' folder."""
    tests, tree = Path(tests).resolve(), Path(tree).resolve()
    interpret, device = choose_device(options.interpret)
    check_inputs(tests, tree, interpret)
    args = list(options.pytest_args)
    if series_dir is not None:
        series_dir = Path(series_dir).resolve()
        _check_series_data(series_dir, tree, args)
    if cache is None:  # a command passes its context's; bakery's own otherwise
        from bakery.sources.cache import Cache

        cache = Cache()
    name = options.env or series_env or environments.default(interpret=interpret)
    env = environments.get(name).prepare(tree, gpu=not interpret, cache=cache)
    pristine, missing = options.pristine, None
    if pristine is None and not any(a.startswith("--bakery-pristine") for a in args):
        pristine, missing = pristine_for(tests, tree, cache)
    if pristine is not None and not any(a.startswith("--bakery-pristine") for a in args):
        args.append(f"--bakery-pristine={pristine}")
    if missing is not None:
        args.append("--bakery-no-pristine")  # its tests are left out, and said to be
    cache_root = cache.root if options.reuse is not Reuse.OFF else None
    return VerifyPlan(
        tests=tests,
        tree=tree,
        interpret=interpret,
        device=device,
        env=env,
        pytest_args=tuple(args),
        series_dir=series_dir,
        pristine=pristine,
        pristine_missing=missing,
        jobs=_jobs(options.jobs, interpret, args),
        junit=Path(options.junit).resolve() if options.junit is not None else None,
        log=options.log,
        reuse=options.reuse,
        cache_root=cache_root,
    )


def choose_device(interpret: bool | None) -> tuple[bool, str]:
    """(interpret, where the tests run, in words). None: a GPU when torch sees one, else
    the CPU; every command decides here, and says what it chose."""
    if interpret is None:
        if cuda_available():
            return False, "on the GPU (found one; --interpret for the CPU)"
        return True, "on the CPU with Triton's interpreter (no CUDA GPU visible)"
    if interpret:
        return True, "on the CPU with Triton's interpreter (--interpret)"
    return False, "on the GPU (--gpu)"


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


def cuda_available() -> bool:
    """Whether torch would see a CUDA GPU, asked without importing torch (gpus.py)."""
    from bakery.testing import gpus

    try:
        return bool(gpus.visible())
    except gpus.TorchMissing as exc:
        raise VerifyError(f"torch is not installed ({exc}); install bakery[kernels]") from None


def default_jobs(interpret: bool) -> int:
    """Workers for a verify run: half the cores, up to 4, under the interpreter (the
    other half runs the tests' rank processes: on 2 cores a second worker cost 50% more
    CPU for no gain in wall time, BENCHMARKS.md); one on a GPU (the ranks already hold
    the GPUs); one without pytest-xdist."""
    if not interpret or importlib.util.find_spec("xdist") is None:
        return 1
    return max(1, min((os.cpu_count() or 1) // 2, 4))


def _jobs(jobs: int | None, interpret: bool, pytest_args: Sequence[str]) -> int:
    if jobs is None:
        # -x / --maxfail stop the run at a failure: one worker, so that the stop is a
        # failed run (exit 1), not an interrupted one (pytest-xdist's stop exits 2)
        stops = any(a in ("-x", "--exitfirst") or a.startswith("--maxfail") for a in pytest_args)
        return 1 if stops else default_jobs(interpret)
    if jobs > 1 and importlib.util.find_spec("xdist") is None:
        raise VerifyError("--jobs needs pytest-xdist: install bakery[kernels]")
    return jobs


def pristine_for(tests: Path, tree: Path, cache: Cache) -> tuple[Path | None, str | None]:
    """(the pristine tree of the bake's release, why there is none) for the oracle tests
    (issue 45: a tree verified on a host that did not bake it): the cached one; else, where
    the series' tests ask for it (``pristine_tree``), the release fetched into the cache
    from the package index; where that fails, why, and the oracle's tests do not run."""
    found = cached_pristine(tree, cache)
    release = expect.Bake.of(tree).release
    if found is not None or release is None or not _asks_for_pristine(tests):
        return found, None
    from bakery.errors import BakeryError
    from bakery.sources import resolve

    try:
        resolve.release(release, cache).close()
    except BakeryError as e:
        return None, f"vLLM {release} is not in bakery's cache and cannot be fetched ({e.message})"
    found = cached_pristine(tree, cache)
    return found, None if found is not None else f"vLLM {release}: no pristine tree in the cache"


def _asks_for_pristine(tests: Path) -> bool:
    """Whether a test of the folder takes the ``pristine_tree`` fixture (read, not run)."""
    for path in sorted(tests.rglob("*.py")):
        try:
            if "pristine_tree" in path.read_text(encoding="utf-8", errors="replace"):
                return True
        except OSError:
            continue
    return False


def cached_pristine(tree: Path, cache: Cache) -> Path | None:
    """The pristine tree of the bake's release in bakery's cache, where it is intact."""
    release = expect.Bake.of(tree).release
    if release is None:
        return None
    from bakery.errors import SourceError

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


def _check_series_data(series_dir: Path, tree: Path, pytest_args: Sequence[str]) -> None:
    """Before pytest starts, one line (VerifyError) for a malformed data file of the
    series, or for a tree that no rule of the series applies to."""
    try:
        expect.check_files(series_dir)
    except expect.SeriesDataError as e:
        raise VerifyError(str(e)) from None
    why = expect.no_rules(series_dir, tree, named_rules(pytest_args))
    if why:
        raise VerifyError(why)
