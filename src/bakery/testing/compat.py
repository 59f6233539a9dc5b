"""Fixes for known bugs of the tools the bundled tests run under.

Each fix is the upstream one, applied only where the bug bites, and reported in
the pytest header so that nobody mistakes it for part of the tree under test.
"""

from __future__ import annotations

import os
from typing import Any

#: Names of the fixes applied in this process.
APPLIED: list[str] = []


def interpret_mode() -> bool:
    """Whether Triton kernels run through its CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _numpy_refuses_array_to_int() -> bool:
    import numpy as np

    try:
        int(np.array([1]))
    except TypeError:
        return True
    return False


def fix_triton_interpreter() -> None:
    """triton-lang/triton#9171: with NumPy >= 2.4 the interpreter's ``tensor.__index__``
    raises on its own 1-element scalars (``range(tl.cdiv(n, 1024))`` in a kernel).
    Upstream's fix converts through ``.item()``; Triton 3.6 predates it."""
    name = "triton-lang/triton#9171 (interpreter scalar __index__ under NumPy >= 2.4)"
    if name in APPLIED or not _numpy_refuses_array_to_int():
        return
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patch_lang_tensor
    APPLIED.append(name)
