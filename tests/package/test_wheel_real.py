"""bakery wheel on vLLM 0.34.0's real wheels, x86_64 and aarch64 (network: the wheels,
~239 MB each, and the sdist download once into ``BAKERY_TEST_CACHE``).

pip installs each baked wheel (``--no-deps --target``, for the wheel's own platform); every
RECORD row is checked against the member's bytes; the installed ``candidate_blocks.py`` is
the baked tree's; the tags are the upstream wheel's.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result
from packaging.utils import parse_wheel_filename

from tests.support.archives import check_record, pip_install_wheel
from tests.support.paths import PROJECT, TEST_CACHE

pytestmark = pytest.mark.network

RELEASE = "0.34.0"
FILE = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"


@pytest.fixture(autouse=True)
def _dcp2_home(home: Path, tmp_path: Path) -> Iterator[None]:
    """The real dcp2 series and its 0.34.0 port; the large outputs are removed after."""
    shutil.copytree(PROJECT / "launcher" / "dcp2", home / "launcher" / "dcp2")
    port = PROJECT / "patches" / "dcp2" / RELEASE
    shutil.copytree(port, home / "patches" / "dcp2" / RELEASE)
    yield
    for p in tmp_path.iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("platform", ["x86_64", "aarch64"])
def test_real_wheel_installs_the_baked_file(
    cli: Callable[..., Result], tmp_path: Path, platform: str
) -> None:
    r = cli(
        "wheel", "dcp2", "--vllm", RELEASE, "--platform", platform, "--out", "dist", "--unverified"
    )
    assert r.exit_code == 0, r.stderr
    (path,) = (tmp_path / "dist").iterdir()
    listing = json.loads((TEST_CACHE / "wheels" / f"vllm-{RELEASE}.index.json").read_text())
    (upstream,) = [w["filename"] for w in listing if w["filename"].endswith(f"_{platform}.whl")]
    assert parse_wheel_filename(path.name)[3] == parse_wheel_filename(upstream)[3]
    assert path.name.startswith(f"vllm-{RELEASE}+dcp2.")

    contents = check_record(path)  # every member against its RECORD row (and its CRC)
    info_dir = path.name.split("-cp")[0] + ".dist-info"
    with zipfile.ZipFile(TEST_CACHE / "wheels" / upstream) as up:
        assert contents[f"{info_dir}/WHEEL"] == up.read(f"vllm-{RELEASE}.dist-info/WHEEL")
        assert contents[FILE] != up.read(FILE), "the series changes the file"
    recorded = json.loads(contents[f"{info_dir}/bakery.json"])
    assert recorded["port"] == RELEASE and recorded["changed"] == {FILE: "M"}
    del contents

    target = tmp_path / "site"
    pip_install_wheel(path, target, f"manylinux_2_28_{platform}")
    tree = tmp_path / "home" / "build" / f"dcp2-{RELEASE}"
    assert (target / FILE).read_bytes() == (tree / FILE).read_bytes()
    assert (target / info_dir / "METADATA").read_text().splitlines()[2] == (
        f"Version: {path.name.split('-')[1]}"
    )
