"""A verify says which of Triton's interpreter bugs bakery fixed only where a kernel could
use the fix: a series with no kernels gets no "test tools" line (the trial, finding 8).
A fresh process each time: the fixes and the kernels live in one interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

MAIN = textwrap.dedent(
    """
    import json, sys
    from bakery.testing import compat

    compat.fix_triton_interpreter()
    said = {"applied": list(compat.APPLIED), "before": compat.reported()}
    import plain  # a module with no kernel: still nothing to say
    said["plain"] = compat.reported()
    if sys.argv[1] == "kernel":
        import kern
        said["kernel"] = compat.reported()
    print(json.dumps(said))
    """
)
PLAIN = "import triton\n\nX = 1\n"
KERN = textwrap.dedent(
    """
    import triton
    import triton.language as tl

    @triton.jit
    def double(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) * 2)
    """
)


def _said(tmp_path: Path, what: str) -> dict[str, list[str]]:
    for name, text in (("main.py", MAIN), ("plain.py", PLAIN), ("kern.py", KERN)):
        (tmp_path / name).write_text(text)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run(
        [sys.executable, "main.py", what],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    said: dict[str, list[str]] = json.loads(out.stdout.splitlines()[-1])
    return said


def test_no_kernel_no_tool_fix_line(tmp_path: Path) -> None:
    said = _said(tmp_path, "plain")
    if not said["applied"]:
        pytest.skip("this Triton needs no fix of its interpreter")
    assert said["before"] == [] and said["plain"] == []


def test_a_kernel_gets_the_fixes_named(tmp_path: Path) -> None:
    said = _said(tmp_path, "kernel")
    assert said["plain"] == [] and said["kernel"] == said["applied"]
