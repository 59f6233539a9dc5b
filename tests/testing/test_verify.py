"""bakery verify: the tree loader, the pytest plugin, the rank pool and run_verify.

The tree is a minimal vLLM-like folder in tmp_path holding the baked dcp2 kernel
(``fixtures/dcp2_baked_0.30.0/candidate_blocks.py``, vLLM's Apache-2.0 file with the
user's diff applied); everything else it imports is stood in.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bakery.errors import BakeryError, VerifyError
from bakery.testing import loader, standins
from bakery.testing.dist import RankError, RankPool, RankTimeout
from bakery.verifying.plan import VerifyPlan
from bakery.verifying.runner import pytest_command
from tests.support.paths import FIXTURES, PROJECT
from tests.support.trees import write_files
from tests.support.verify import run_tests

FIXTURE = FIXTURES / "dcp2_baked_0.30.0" / "candidate_blocks.py"
MODULE = "vllm.model_executor.kernels.attention.dsa.candidate_blocks"
FILE = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
BUNDLED = PROJECT / "launcher" / "dcp2" / "tests"
TRAP = "raise RuntimeError('a package __init__.py was executed')\n"


def make_tree(root: Path, kernel: str | None = None) -> Path:
    """A vLLM-like tree: the baked kernel, package inits that must never run, and the
    manifest of a dcp2 bake of vLLM 0.30.0 (verify keys its expectations on it)."""
    diff = next((PROJECT / "launcher" / "dcp2" / "diffs").glob("*.diff")).name
    manifest = {"vllm": {"version": "0.30.0"}, "diffs": [{"name": diff}]}
    return write_files(
        root,
        {
            "vllm/__init__.py": TRAP,
            "vllm/model_executor/__init__.py": TRAP,
            "vllm/model_executor/kernels/attention/dsa/__init__.py": TRAP,
            "vllm/triton_utils/__init__.py": TRAP,
            FILE: kernel if kernel is not None else FIXTURE.read_text(),
            ".bakery/manifest.json": json.dumps(manifest),
        },
    )


def mutate(old: str, new: str) -> str:
    text = FIXTURE.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "tree")


@pytest.fixture
def clean_loader() -> Iterator[None]:
    """The loader changes sys.meta_path and sys.modules: undo that after each test."""
    before = set(sys.modules)
    yield
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, loader.TreeFinder)]
    for name in set(sys.modules) - before:
        if name == "vllm" or name.startswith("vllm."):
            del sys.modules[name]
    loader.PROVENANCE.clear()


# --- the loader ----------------------------------------------------------------------------------


def test_loads_the_tree_file_under_its_real_name(tree: Path, clean_loader: None) -> None:
    module = loader.load_tree_module(MODULE, tree)

    assert module.__name__ == MODULE
    assert module.__file__ is not None and Path(module.__file__) == tree / FILE
    assert callable(module.select_candidate_blocks) and module._DCP_REDUCE_BYTES > 0
    origins = loader.provenance()
    assert origins[MODULE] == loader.Origin("tree", str(tree / FILE))
    assert origins["vllm.triton_utils"].kind == "stand-in"
    assert origins["vllm"] == loader.Origin("package", str(tree / "vllm"))
    import triton

    assert sys.modules["vllm.triton_utils"].triton is triton
    assert not list(tree.rglob("__pycache__")), "nothing may be written into the tree"


def _never_supported(module: object) -> None:
    module.is_deep_select_supported = lambda *a, **k: False  # type: ignore[attr-defined]


def test_prefers_the_tree_and_falls_back_to_stand_ins(
    tmp_path: Path, clean_loader: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A series declares the stand-ins of its own code paths (dcp2: in its tests).
    name = "vllm.model_executor.layers.indexer_topk"
    monkeypatch.setitem(
        standins.STANDINS, name, standins.StandIn(name, "never supported", _never_supported, True)
    )
    tree = write_files(
        tmp_path / "tree",
        {
            "vllm/__init__.py": TRAP,
            "vllm/utils/math_utils.py": "def round_up(x, y):\n    return -(-x // y) * y\n",
            # Not light: reaches a package attribute that only its __init__.py would define.
            "vllm/model_executor/layers/indexer_topk.py": (
                "import vllm.utils.helper\nfrom vllm.config import get_current_vllm_config\n"
            ),
            "vllm/utils/helper.py": "X = 1\n",
            "vllm/config/__init__.py": "def get_current_vllm_config(): ...\n",
            "vllm/k.py": textwrap.dedent("""\
            from vllm.model_executor.layers.indexer_topk import is_deep_select_supported
            from vllm.platforms import current_platform
            from vllm.utils.math_utils import round_up
            """),
        },
    )
    module = loader.load_tree_module("vllm.k", tree)

    assert module.round_up(5, 4) == 8
    assert module.is_deep_select_supported() is False
    assert module.current_platform.is_rocm() is False
    origins = loader.provenance()
    assert origins["vllm.utils.math_utils"].kind == "tree"
    stood_in = origins["vllm.model_executor.layers.indexer_topk"]
    assert stood_in.kind == "stand-in" and "get_current_vllm_config" in stood_in.detail
    assert origins["vllm.platforms"].kind == "stand-in"
    # What the failed attempt imported is rolled back.
    assert "vllm.utils.helper" not in sys.modules and "vllm.utils.helper" not in origins


def test_refuses_what_is_neither_in_the_tree_nor_stood_in(tree: Path, clean_loader: None) -> None:
    loader.install(tree)
    with pytest.raises(ModuleNotFoundError, match="neither in the tree"):
        __import__("vllm.no_such_module")
    with pytest.raises(ImportError, match="must come from the tree"):
        loader.load_tree_module("vllm.triton_utils", tree)


def test_one_tree_per_process(tree: Path, tmp_path: Path, clean_loader: None) -> None:
    with pytest.raises(FileNotFoundError, match="not a vLLM tree"):
        loader.install(tmp_path)
    assert loader.install(tree) is loader.install(tree)
    with pytest.raises(RuntimeError, match="already serves"):
        loader.install(make_tree(tmp_path / "other"))


def test_tree_comes_from_the_environment(
    tree: Path, clean_loader: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(loader.TREE_ENV, raising=False)
    with pytest.raises(RuntimeError, match=loader.TREE_ENV):
        loader.load_tree_module(MODULE)
    monkeypatch.setenv(loader.TREE_ENV, str(tree))
    assert loader.load_tree_module(MODULE).__file__ == str(tree / FILE)


# --- run_verify and the plugin ----------------------------------------------------------------

QUICK_TEST = textwrap.dedent("""\
    import os

    from bakery.testing import load_tree_module

    cb = load_tree_module("vllm.model_executor.kernels.attention.dsa.candidate_blocks")


    def test_tree(baked_tree, interpret, device):
        assert os.environ["BAKERY_TREE"] == str(baked_tree)
        assert interpret and os.environ["TRITON_INTERPRET"] == "1"
        assert device.type == "cpu"
        assert cb.__file__.startswith(str(baked_tree))


    def test_prefill_accumulator():
        cb.prefill_acc_add("a", 1.0)
        assert cb.prefill_acc_take() == {"a": 1.0}
    """)


def quick_tests(root: Path, body: str = QUICK_TEST) -> Path:
    return write_files(root, {"test_quick.py": body})


def test_run_verify_passes_and_reports_modules(tmp_path: Path, tree: Path) -> None:
    junit = tmp_path / "out" / "junit.xml"
    result = run_tests(
        quick_tests(tmp_path / "t"), tree, interpret=True, pytest_args=["-q"], junit=junit
    )

    assert (result.exit_code, result.passed, result.failed, result.errors) == (0, 2, 0, 0)
    assert [m.name for m in result.from_tree] == [MODULE]
    assert "vllm.triton_utils" in [m.name for m in result.stood_in]
    assert result.elapsed > 0 and "testcase" in junit.read_text()


def test_run_verify_fails_on_a_failing_test(tmp_path: Path, tree: Path) -> None:
    body = QUICK_TEST + "\n\ndef test_broken():\n    assert cb._DCP_REDUCE_BYTES == 1\n"
    result = run_tests(quick_tests(tmp_path / "t", body), tree, interpret=True)
    assert (result.exit_code, result.passed, result.failed) == (1, 2, 1)


def test_run_verify_fails_when_no_test_runs(tmp_path: Path, tree: Path) -> None:
    result = run_tests(quick_tests(tmp_path / "t", "X = 1\n"), tree, interpret=True)
    assert result.exit_code == 1 and result.no_tests


def test_a_collection_error_is_a_failure(tmp_path: Path) -> None:
    broken = make_tree(tmp_path / "tree", kernel="import vllm.not_stood_in\n")
    result = run_tests(quick_tests(tmp_path / "t"), broken, interpret=True)
    assert result.exit_code == 1 and result.errors == 1


def test_run_verify_refuses_bad_input(
    tmp_path: Path, tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tests = quick_tests(tmp_path / "t")
    with pytest.raises(VerifyError, match="no bundled tests"):
        run_tests(tmp_path / "missing", tree, interpret=True)
    with pytest.raises(VerifyError, match="no test_"):
        run_tests(tree, tree, interpret=True)
    with pytest.raises(VerifyError, match="no baked tree"):
        run_tests(tests, tmp_path / "nowhere", interpret=True)
    with pytest.raises(VerifyError, match="not a vLLM tree"):
        run_tests(tests, tests, interpret=True)
    with pytest.raises(VerifyError, match="pytest stopped: usage error") as info:
        run_tests(tests, tree, interpret=True, pytest_args=["--no-such-option"])
    assert isinstance(info.value, BakeryError) and info.value.exit_code == 2
    monkeypatch.setattr("bakery.verifying.plan.cuda_available", lambda: False)
    with pytest.raises(VerifyError, match="--interpret"):
        run_tests(tests, tree, interpret=False)


def test_plugin_without_gpu_or_tree_is_a_usage_error(tmp_path: Path, tree: Path) -> None:
    """No tree: a usage error. No GPU without --bakery-interpret: a usage error too, on a
    GPU host as well (CUDA_VISIBLE_DEVICES="" hides its GPUs from torch)."""
    import subprocess

    tests = quick_tests(tmp_path / "t")
    env = {k: v for k, v in os.environ.items() if k not in ("BAKERY_TREE", "TRITON_INTERPRET")}
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "bakery.testing.plugin",
        "-c",
        os.devnull,
        str(tests),
    ]
    no_tree = subprocess.run(base, env=env, capture_output=True, text=True, check=False)
    assert no_tree.returncode == 4 and "--bakery-tree DIR is required" in no_tree.stderr
    no_gpu = subprocess.run(
        [*base, f"--bakery-tree={tree}"],
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        check=False,
    )
    assert no_gpu.returncode == 4 and "--bakery-interpret" in no_gpu.stderr


def test_pytest_command_keeps_other_configuration_out(tmp_path: Path) -> None:
    plan = VerifyPlan(tests=BUNDLED, tree=tmp_path, interpret=True, pytest_args=("-x",))
    command = pytest_command(plan)
    assert f"-c={BUNDLED / 'pytest.ini'}" in command
    assert command[-2:] == ["-x", str(BUNDLED)]
    assert "--bakery-interpret" in command and f"--bakery-tree={tmp_path}" in command


def test_results_json_is_readable(tmp_path: Path, tree: Path) -> None:
    # The plugin's report, as run_verify reads it: a plain JSON object.
    report = tmp_path / "report.json"
    command = pytest_command(
        VerifyPlan(tests=quick_tests(tmp_path / "t"), tree=tree, interpret=True),
        report=report,
        empty_ini=write_files(tmp_path, {"e.ini": "[pytest]\n"}) / "e.ini",
    )
    import subprocess

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    assert subprocess.run(command, env=env, capture_output=True, check=False).returncode == 0
    data = json.loads(report.read_text())
    assert data["counts"]["passed"] == 2 and data["interpret"] is True


# --- the rank pool -----------------------------------------------------------------------------


def rank_and_sum(ctx, value: int) -> tuple[int, int]:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value + ctx.rank])
    dist.all_reduce(t, group=ctx.group)
    return ctx.rank, int(t.item())


def rank_raises(ctx) -> None:
    raise ValueError(f"boom on rank {ctx.rank}")


def rank_zero_waits_alone(ctx) -> None:
    import torch
    import torch.distributed as dist

    if ctx.rank == 0:
        dist.all_reduce(torch.zeros(1), group=ctx.group)


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"  # CPU ranks over gloo
    try:
        with RankPool(2, timeout=60) as p:
            yield p
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


def test_rank_pool_runs_real_ranks(pool: RankPool) -> None:
    assert pool.backend == "gloo"
    assert pool.run(rank_and_sum, 10) == [(0, 21), (1, 21)]
    assert pool.map(rank_and_sum, [(1,), (5,)]) == [(0, 7), (1, 7)]


def test_rank_pool_reports_a_rank_error(pool: RankPool) -> None:
    with pytest.raises(RankError, match="boom on rank 0"):
        pool.run(rank_raises)
    assert pool.run(rank_and_sum, 0) == [(0, 1), (1, 1)]  # a fresh pool


def test_rank_pool_kills_a_stuck_collective(pool: RankPool) -> None:
    """Rank 1 answers at once; rank 0 waits in a collective alone. The pool is killed
    once rank 0 has had the grace after rank 1's answer, long before the task's own
    deadline (here 20 minutes): a bound on the grace, not on how loaded the machine is."""
    deadline = 1200.0
    started = time.monotonic()
    with pytest.raises(RankTimeout, match=r"ranks \[0\]"):
        pool.run(rank_zero_waits_alone, timeout=deadline)
    assert time.monotonic() - started < deadline / 2, "killed by the deadline, not the grace"
    assert pool.run(rank_and_sum, 0) == [(0, 1), (1, 1)]


def rank_sys_path(ctx) -> list[str]:
    return list(sys.path)


def test_ranks_search_the_sys_path_their_owner_had(
    pool: RankPool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fork server may start before pytest puts the tests' folders on sys.path (the
    plugin starts it with the session on a GPU host): a rank's task still finds the
    helpers its test module imports (multiprocessing sends each new process its
    owner's sys.path)."""
    pool.run(rank_and_sum, 0)  # the fork server runs, started without tmp_path
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with RankPool(1, timeout=60) as late:
        (seen,) = late.run(rank_sys_path)
    assert seen[0] == str(tmp_path)


# --- the bundled suite (slow: runs the kernels under the Triton interpreter) ----------------------

SUM = ("ReduceOp.MAX", "ReduceOp.SUM")
NO_PIN = ('            scores.scatter_(1, pin[r0:r1], float("inf"))\n', "")
# the mask path (apply_candidate_mask): columns past a row's causal end are kept; block ids
# taken from the packed column instead of the row's start
MASK_PAST_END = (
    "valid = (cols >= start) & (cols < end) & (cols < width)",
    "valid = (cols >= start) & (cols < width)",
)
MASK_NO_START = ("block = (cols - start) // BLOCK_SIZE", "block = cols // BLOCK_SIZE")
#: Tests of the bundled suite skipped on vLLM 0.30.0's kernel, each for a feature a later
#: release added (the skip reasons name it), and those of the series' registered known
#: defects (strict xfails). Update them with the bundled suite.
# 0.30.0 has no score_dtype and runs no bf16 (expectations.toml's skips for it)
SKIPPED_ON_0_30_0 = 43
PRISTINE_0_30_0 = PROJECT / "tests" / "fixtures" / "dsa" / "candidate_blocks-0.30.0.py"
KNOWN_DEFECT_TESTS = 19


def collected(tests: Path, tree: Path, *pytest_args: str) -> int:
    """How many tests the bundled suite holds, as pytest collects them (-k included)."""
    import subprocess

    args = ("--collect-only", "-q", *pytest_args)
    command = pytest_command(VerifyPlan(tests=tests, tree=tree, interpret=True, pytest_args=args))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sum(1 for line in proc.stdout.splitlines() if "::" in line)


@pytest.mark.slow
def test_bundled_suite_passes_on_the_baked_kernel(tmp_path: Path, tree: Path) -> None:
    """Every collected test ran: passed, skipped for a feature 0.30.0 does not have, or a
    strict expected failure of a registered known defect."""
    # the pristine oracle's other side: 0.30.0's own kernel (tests/fixtures/dsa)
    pristine = make_tree(tmp_path / "pristine", kernel=PRISTINE_0_30_0.read_text())
    args = ["-q", f"--bakery-pristine={pristine}"]
    total = collected(BUNDLED, tree, f"--bakery-pristine={pristine}")
    result = run_tests(BUNDLED, tree, interpret=True, pytest_args=args)
    assert result.exit_code == 0, result
    assert (result.failed, result.errors, result.xpassed) == (0, 0, 0), result
    assert result.skipped == SKIPPED_ON_0_30_0, result
    assert result.known_defects == {"dcp2-mask-past-width": 15, "dcp2-nan-max-reduce": 4}
    assert result.xfailed == 0 and sum(result.known_defects.values()) == KNOWN_DEFECT_TESTS
    assert result.passed == total - SKIPPED_ON_0_30_0 - KNOWN_DEFECT_TESTS > 100, (total, result)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "tests"),
    [(SUM, "dcp"), (NO_PIN, "dcp"), (MASK_PAST_END, "mask"), (MASK_NO_START, "mask")],
    ids=["reduce-sum", "no-pin", "mask-past-end", "mask-no-start"],
)
def test_bundled_suite_fails_on_a_broken_kernel(
    tmp_path: Path, change: tuple[str, str], tests: str
) -> None:
    broken = make_tree(tmp_path / "tree", kernel=mutate(*change))
    result = run_tests(BUNDLED, broken, interpret=True, pytest_args=["-q", "-x", "-k", tests])
    assert result.exit_code == 1 and result.failed == 1 and result.errors == 0, result
