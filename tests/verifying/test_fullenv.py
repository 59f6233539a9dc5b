"""The full test environment (bakery.verifying.fullenv) and the loader's full mode, on small
synthetic trees: what is installed and what is left out, one real environment built and
then reused from the cache, an install that fails as one line, a package whose
``__init__.py`` runs in the full mode only, and a series whose test imports vLLM as
vLLM's own tests do (``from vllm.sampling_params import SamplingParams``) under
``bakery verify --env full``, where ``--env light`` names ``--env full``. The real vLLM
environment is tests/test_second_series.py's (network)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import VerifyError
from bakery.sources.cache import Cache
from bakery.verifying import fullenv
from bakery.verifying import requirements as reqfiles
from tests.support.archives import pure_wheel
from tests.support.index import serve
from tests.support.series import make_series, udiff
from tests.support.trees import cache_release, write_files

COMMON = """\
regex # a comment
msgspec
torch == 2.13.0
triton @ https://example.invalid/triton.whl
protobuf == 7.36.1; platform_machine == "s390x"
--extra-index-url https://example.invalid/simple
"""
CPU = """\
-r common.txt
numba == 0.65.0
torchvision; platform_machine != "riscv64"
intel-openmp==2024.2.1
"""


def test_requirements_keep_vllms_and_leave_out_bakerys(tmp_path: Path) -> None:
    write_files(tmp_path, {"requirements/common.txt": COMMON, "requirements/cpu.txt": CPU})
    gpu = reqfiles.requirements(tmp_path, cpu=False)
    assert gpu.kept == ["regex", "msgspec"]
    assert gpu.files == ["requirements/common.txt"]
    assert gpu.dropped == {
        "torch == 2.13.0": "bakery's own torch serves the tests",
        "triton @ https://example.invalid/triton.whl": "bakery's own Triton serves the tests",
        'protobuf == 7.36.1; platform_machine == "s390x"': "not for this host (its marker)",
    }
    cpu = reqfiles.requirements(tmp_path, cpu=True)
    assert cpu.kept == ["regex", "msgspec", "numba == 0.65.0"]
    assert "torchvision" in next(k for k in cpu.dropped if k.startswith("torchvision"))
    assert cpu.dropped["intel-openmp==2024.2.1"] == "the CPU torch wheel's own runtime, not vLLM's"


def test_the_key_follows_the_requirements(tmp_path: Path) -> None:
    write_files(tmp_path, {"requirements/common.txt": "regex\n"})
    one = reqfiles.requirements(tmp_path, cpu=False)
    pins = {"torch": "2.13.0+cpu"}
    assert fullenv.env_key(one, pins) == fullenv.env_key(one, dict(pins))
    (tmp_path / "requirements/common.txt").write_text("regex\nmsgspec\n")
    two = reqfiles.requirements(tmp_path, cpu=False)
    assert fullenv.env_key(two, pins) != fullenv.env_key(one, pins)
    assert fullenv.env_key(one, {"torch": "2.14.0"}) != fullenv.env_key(one, pins)


def test_a_tree_without_requirements_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(VerifyError, match="no requirements/common.txt.*--env light"):
        reqfiles.requirements(tmp_path, cpu=True)


def test_a_requirements_file_may_not_leave_its_folder(tmp_path: Path) -> None:
    write_files(tmp_path, {"requirements/common.txt": "-r ../../etc/reqs.txt\n"})
    with pytest.raises(VerifyError, match="leaves the requirements folder"):
        reqfiles.requirements(tmp_path, cpu=False)


def test_an_environment_is_built_once_and_layered_on_bakerys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing to install (torch is bakery's): a real venv, whose Python imports bakery's
    torch through the layer, and which the second call finds in the cache."""
    write_files(tmp_path / "tree", {"requirements/common.txt": "torch\n"})
    cache = Cache(tmp_path / "cache")
    caplog.set_level(logging.INFO, logger="bakery")
    first = fullenv.ensure(tmp_path / "tree", cpu=False, cache=cache)
    events = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert first.built and events and "building the full test environment" in events[0]
    marker = json.loads((cache.root / "envs" / f"{first.key}.json").read_text())
    assert marker["requirements"] == [] and marker["installed"] == []
    assert marker["left_out"] == {"torch": "bakery's own torch serves the tests"}
    assert marker["pins"]["torch"] == fullenv.pins()["torch"]
    out = subprocess.run(
        [str(first.python), "-c", "import sys, torch; print(sys.prefix); print(torch.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert Path(out[0]) == first.path and out[1] == fullenv.pins()["torch"]
    again = fullenv.ensure(tmp_path / "tree", cpu=False, cache=cache)
    assert not again.built and again.key == first.key and again.python == first.python
    assert not list((cache.root / "envs").glob(".build-*"))


def test_a_failed_install_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # no index at all: the requirement is not found
    monkeypatch.setenv("UV_OFFLINE", "1")  # the same for uv, where it is the installer
    write_files(tmp_path / "tree", {"requirements/common.txt": "bakery-test-no-such-dist\n"})
    cache = Cache(tmp_path / "cache")
    with pytest.raises(VerifyError, match="could not be installed: .*bakery-test-no-such-dist"):
        fullenv.ensure(tmp_path / "tree", cpu=False, cache=cache)
    assert [p.name for p in (cache.root / "envs").iterdir()] == []


PACKAGE_INIT = "import vllm.side\nINIT_RAN = True\n"


@pytest.mark.parametrize("mode", ["light", "full"])
def test_the_full_mode_runs_packages_init(tmp_path: Path, mode: str) -> None:
    tree = write_files(
        tmp_path / "tree",
        {"vllm/__init__.py": PACKAGE_INIT, "vllm/side.py": "", "vllm/mod.py": "X = 1\n"},
    )
    code = (
        "from bakery.testing import load_tree_module, provenance\n"
        "import sys\n"
        "m = load_tree_module('vllm.mod')\n"
        "print(getattr(sys.modules['vllm'], 'INIT_RAN', False), provenance()['vllm'].kind)\n"
        "import importlib.util\n"
        "try:\n"
        "    print(importlib.util.find_spec('vllm._C'))\n"
        "except ModuleNotFoundError:\n"
        "    print('raised')\n"
    )
    env = {"BAKERY_TREE": str(tree), "BAKERY_ENV": mode}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, **env},
    )  # fmt: skip
    # full: a compiled extension the source tree lacks is "not found" (None), as vLLM's
    # probes expect; light: bakery's own error names the tree and the stand-ins
    want = ["True", "tree", "None"] if mode == "full" else ["False", "package", "raised"]
    assert proc.stdout.split() == want


# --- a series' test imports vLLM as vLLM's tests do (issue 48) ----------------------------------

SAMPLING = """\
import bakery_test_msgspec  # a requirement of the tree: in the full environment only


class SamplingParams:
    temperature: float = 1.0
"""
PLAIN_IMPORT_TEST = """\
from vllm.sampling_params import SamplingParams

from bakery.testing import load_tree_module, provenance


def test_plain_imports_come_from_the_baked_tree(baked_tree):
    assert SamplingParams().temperature == 0.5  # the series' diff
    assert load_tree_module("vllm.sampling_params").SamplingParams is SamplingParams
    assert provenance()["vllm.sampling_params"].detail == str(
        baked_tree / "vllm" / "sampling_params.py"
    )
"""


def test_a_series_test_imports_vllm_plainly_under_the_full_environment(
    cli: Callable[..., Result], home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One environment (a wheel from a local index, installed once), two runs: full
    passes; light fails in one line that names --env full."""
    cache_release(
        "1.0.0",
        {
            "vllm/__init__.py": "",
            "vllm/sampling_params.py": SAMPLING,
            "requirements/common.txt": "torch\nbakery-test-msgspec\n",
        },
    )
    diff = udiff("sampling_params.py", SAMPLING, SAMPLING.replace("1.0", "0.5"))
    series = make_series(home, "s", {"01-t.diff": diff}, 'root = "vllm"\nstrip = 1\nenv = "full"\n')
    write_files(series / "tests", {"test_plain.py": PLAIN_IMPORT_TEST})
    assert cli("apply", "s", "--vllm", "1.0.0").exit_code == 0
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    with serve(tmp_path / "site") as site:
        name, data = pure_wheel("bakery_test_msgspec", "1.0", "")
        site.index([site.add(name, data)], project="bakery-test-msgspec")
        monkeypatch.setenv("BAKERY_INDEX_URL", f"{site.url}/simple")
        report = tmp_path / "full.xml"
        r = cli("verify", "s", "--env", "full", "--interpret", "--no-reuse", "--junit", report)
    assert r.exit_code == 0, r.output
    # the run wrote nothing into the environment (its byte code was compiled at build):
    # the next run finds it as built, offline
    again = cli("verify", "s", "--env", "full", "--interpret", "--no-reuse")
    assert again.exit_code == 0 and "is not used" not in again.output, again.output
    passed = report.read_text()
    assert 'tests="1"' in passed and 'failures="0"' in passed and 'errors="0"' in passed
    r = cli("verify", "s", "--env", "light", "--interpret", "--no-reuse", "--junit", report)
    assert r.exit_code == 1, r.output
    failure = report.read_text()
    assert "No module named" in failure and "bakery_test_msgspec" in failure
    assert "imported by vllm.sampling_params" in failure
    assert "`bakery verify --env full`" in failure


HINT_PROBE = """\
from bakery.testing import loader, standins

standins.STANDINS["vllm.a"] = standins.StandIn("vllm.a", "declared", lambda m: None, True)
try:
    loader.load_tree_module("vllm.b")
except ModuleNotFoundError as e:
    print(e.name, "|", e)
loader.load_tree_module("vllm.c")  # vllm.a: the tree's file fails, the stand-in serves
print(loader.provenance()["vllm.a"].detail)
"""


@pytest.mark.parametrize("mode", ["light", "full"])
def test_a_missing_package_names_the_full_environment_in_light_only(
    tmp_path: Path, mode: str
) -> None:
    tree = write_files(
        tmp_path / "tree",
        {
            "vllm/__init__.py": "",
            "vllm/a.py": "import vllm.b\n",
            "vllm/b.py": "import bakery_test_no_such_package\n",
            "vllm/c.py": "import vllm.a\n",
        },
    )
    proc = subprocess.run(
        [sys.executable, "-c", HINT_PROBE], capture_output=True, text=True, check=True,
        env={**os.environ, "BAKERY_TREE": str(tree), "BAKERY_ENV": mode},
    )  # fmt: skip
    missing, standin = proc.stdout.splitlines()
    assert missing.startswith("bakery_test_no_such_package | No module named")
    hinted = "imported by vllm.b" in missing and "`bakery verify --env full`" in missing
    assert hinted == (mode == "light")
    # where a stand-in serves, its reason quotes the plain error: nothing to fix there
    assert "bakery_test_no_such_package" in standin and "--env full" not in standin
