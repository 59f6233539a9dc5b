"""The GPUs bakery finds without importing torch must be the GPUs torch sees.

On a machine without a CUDA GPU (CI) the answers agree on "none"; on the device's GPU
host (bench/device_verify.sh runs this file) they agree on the names.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bakery.testing import gpus


def test_the_answer_is_torchs() -> None:
    torch = pytest.importorskip("torch")
    found = gpus.visible()
    assert bool(found) == torch.cuda.is_available()
    if found:
        n = torch.cuda.device_count()
        assert found.names == tuple(torch.cuda.get_device_name(i) for i in range(n))
        assert found.describe() == f"{torch.cuda.get_device_name(0)} x{n}"
    else:
        assert found.describe() == "no GPU"


def test_the_build_is_read_from_torchs_own_file() -> None:
    torch = pytest.importorskip("torch")
    build = gpus.torch_build()
    assert build is not None
    assert build["cuda"] == torch.version.cuda
    assert build.get("hip") == getattr(torch.version, "hip", None)


def test_choosing_the_device_imports_no_torch() -> None:
    """The point of gpus.py: verify's choice and its reuse key cost no torch import."""
    code = (
        "import sys\n"
        "from bakery.verifying.plan import choose_device\n"
        "from bakery.testing import reuse\n"
        "choose_device(None); reuse.device(False)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n",
            {"cuda": "12.8", "hip": None},
        ),
        ("__version__ = '2.13.0+cpu'\ncuda = None\n", {"cuda": None}),
        ("cuda = None\nhip = '6.4'\n", {"cuda": None, "hip": "6.4"}),
        ("cuda = get_cuda()\n", None),  # not a plain value: torch is asked instead
        ("hip = None\n", None),  # no cuda field
        ("cuda = '12.8\n", None),  # not Python
    ],
)
def test_read_build(tmp_path: Path, text: str, want: object) -> None:
    (tmp_path / "version.py").write_text(text)
    assert gpus.read_build(tmp_path / "version.py") == want


def test_no_driver_library_is_no_gpu() -> None:
    assert gpus.driver_devices("libbakery-no-such-driver.so.1") is None


@pytest.mark.parametrize(
    ("build", "driver", "want"),
    [
        ({"cuda": None}, ("GPU A",), gpus.Gpus((), "none")),  # a CPU torch sees none
        ({"cuda": "12.8"}, None, gpus.Gpus((), "none")),  # no driver
        ({"cuda": "12.8"}, (), gpus.Gpus((), "driver")),  # CUDA_VISIBLE_DEVICES=""
        ({"cuda": "12.8"}, ("GPU A", "GPU B"), gpus.Gpus(("GPU A", "GPU B"), "driver")),
        ({"cuda": None, "hip": "6.4"}, ("GPU A",), gpus.Gpus(("asked",), "torch")),
        (None, ("GPU A",), gpus.Gpus(("asked",), "torch")),  # an unreadable version.py
    ],
)
def test_who_is_asked(
    monkeypatch: pytest.MonkeyPatch, build: object, driver: object, want: gpus.Gpus
) -> None:
    monkeypatch.setattr(gpus, "torch_build", lambda: build)
    monkeypatch.setattr(gpus, "driver_devices", lambda: driver)
    monkeypatch.setattr(gpus, "_torch_devices", lambda: gpus.Gpus(("asked",), "torch"))
    assert gpus.visible() == want


def test_without_torch_verify_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakery.errors import VerifyError
    from bakery.verifying.plan import cuda_available

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(VerifyError, match="torch is not installed"):
        cuda_available()
