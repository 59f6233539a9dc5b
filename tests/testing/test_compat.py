"""bakery.testing.compat: the fixes of Triton's interpreter compute what it computes.

Each kernel runs under the interpreter as Triton ships it, then with bakery's fixes,
in one fresh process (``TRITON_INTERPRET`` is read when kernels are defined); the
outputs must be equal bit for bit. The fp16 sum is order-sensitive, so it also shows
that the combine order is kept; the combine with an ``if`` must keep the slow loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter
    from bakery.testing import compat

    @triton.jit
    def nan_max(a, b):
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)

    @triton.jit
    def add(a, b):
        c = a + b
        return c

    @triton.jit
    def argmax_left(v0, i0, v1, i1):
        take = (v1 > v0) | ((v1 == v0) & (i1 < i0))
        return tl.where(take, v1, v0), tl.where(take, i1, i0)

    @triton.jit
    def branchy(a, b):
        if a > b:
            return a
        return b

    @triton.jit
    def kernel(x, out_max, out_sum, out_val, out_idx, out_b, out_w, n,
               R: tl.constexpr, C: tl.constexpr):
        rows = tl.arange(0, R)
        cols = tl.arange(0, C)
        v = tl.load(x + rows[:, None] * C + cols[None, :])
        width = tl.cdiv(n, 4)
        tl.store(out_max + rows, tl.reduce(v, 1, nan_max))
        tl.store(out_sum + cols, tl.reduce(v.to(tl.float16), 0, add))
        idx = tl.broadcast_to(cols[None, :], (R, C))
        val, arg = tl.reduce((v, idx), 1, argmax_left)
        tl.store(out_val + rows, val)
        tl.store(out_idx + rows, arg)
        tl.store(out_b + rows, tl.reduce(v, 1, branchy) + width * 0)
        big = (rows + n) * 1000003 + 2147480000  # wraps around int32
        tl.store(out_w + rows, big - n * 7)

    def run():
        g = torch.Generator().manual_seed(0)
        x = (torch.randn(8, 16, generator=g) * 100).round() / 7
        x[1, 3] = float("nan")
        x[2, :] = 5.0
        i32 = torch.int32
        outs = [torch.empty(8), torch.empty(16, dtype=torch.float16), torch.empty(8),
                torch.empty(8, dtype=i32), torch.empty(8), torch.empty(8, dtype=i32)]
        kernel[(2, 3)](x, *outs, 16, R=8, C=16)
        return [o.view(torch.int16 if o.dtype == torch.float16 else torch.int32).tolist()
                for o in outs]

    calls = {"reduce": 0, "patch": 0, "overflow": 0}
    ops = interpreter.ReduceOps
    slow = ops.generic_reduce
    def counted(self, input):
        calls["reduce"] += 1
        return slow(self, input)
    ops.generic_reduce = counted
    patch = interpreter._patch_lang
    def counted_patch(fn):
        calls["patch"] += 1
        return patch(fn)
    interpreter._patch_lang = counted_patch
    from triton.language import semantic
    checks = semantic.TritonSemantic.binary_op_sanitize_overflow_impl
    def counted_check(self, lhs, rhs, op):
        calls["overflow"] += 1
        return checks(self, lhs, rhs, op)
    semantic.TritonSemantic.binary_op_sanitize_overflow_impl = counted_check
    before = run()
    before_calls = dict(calls)
    calls.update(reduce=0, patch=0, overflow=0)
    compat.fix_triton_interpreter()
    after = run()
    json.dump({"before": before, "after": after, "before_calls": before_calls,
               "applied": compat.APPLIED, "after_calls": calls}, sys.stdout)
    """
)


def _run(tmp: Path) -> dict[str, Any]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    script = tmp / "kernels.py"  # a file: the interpreter reads the kernels' source
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("compat"))


def test_fixed_interpreter_computes_the_same_bits(result: dict[str, Any]) -> None:
    assert result["after"] == result["before"]
    assert compat_names() <= set(result["applied"])


def test_nested_calls_patch_less(result: dict[str, Any]) -> None:
    before = result["before_calls"]["patch"]
    after = result["after_calls"]["patch"]
    # one launch, then each of the 6 programs calls tl.cdiv (in triton.language.core)
    assert before == 1 + 6, before
    # the launch patches triton.language, the first tl.cdiv triton.language.core
    assert after == 2, after


def test_only_the_branchy_combine_keeps_the_loop(result: dict[str, Any]) -> None:
    # 6 programs x 4 custom reduces before; after, only the combine with an `if`
    assert result["before_calls"]["reduce"] == 6 * 4
    assert result["after_calls"]["reduce"] == 6


def test_no_overflow_check_is_computed(result: dict[str, Any]) -> None:
    # the kernel's int32 arithmetic wraps (same bits, above); the checks are gone
    assert result["before_calls"]["overflow"] > 0
    assert result["after_calls"]["overflow"] == 0


def compat_names() -> set[str]:
    from bakery.testing import compat

    return {compat.NESTED, compat.REDUCE, compat.OVERFLOW}


def test_straight_line_combines_only() -> None:
    import triton.language as tl

    from bakery.testing import compat

    def nan_max(a: Any, b: Any) -> Any:
        return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)

    def branchy(a: Any, b: Any) -> Any:
        if a > b:
            return a
        return b

    def exp_sum(a: Any, b: Any) -> Any:
        return tl.exp(a) + b

    def indexed(a: Any, b: Any) -> Any:
        return a[0] + b

    assert compat.straight_line_combine(nan_max)
    assert not compat.straight_line_combine(branchy)
    assert not compat.straight_line_combine(exp_sum)
    assert not compat.straight_line_combine(indexed)
