"""Fixes for known bugs of the tools the bundled tests run under.

Each fix is the upstream one (or, for a cost with no upstream fix yet, the one
Triton's own tools use), applied only where the bug bites, and reported in the
pytest header so that nobody mistakes it for part of the tree under test.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
import warnings
from typing import Any

#: Names of the fixes applied in this process.
APPLIED: list[str] = []


def reported() -> list[str]:
    """The fixes applied in this process, where something here could use them: a Triton
    kernel (a ``@triton.jit`` function) defined at module level outside Triton, torch and
    bakery (the tree's modules, the tests'). A series with no kernels still gets the fixes
    (loading any tree module applies them) but no line about them: they fixed nothing it
    ran. Read once, at the session's end; never on the kernels' path."""
    if not APPLIED:
        return []
    jit = sys.modules.get("triton.runtime.jit")
    kernel = getattr(jit, "KernelInterface", None)
    if not isinstance(kernel, type):
        return []
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in ("triton", "torch", "bakery") or module is None:
            continue
        try:
            values = list(vars(module).values())
        except TypeError:  # a module stand-in without a __dict__
            continue
        if any(isinstance(v, kernel) for v in values):
            return list(APPLIED)
    return []


def interpret_mode() -> bool:
    """Whether Triton kernels run through its CPU interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _numpy_refuses_array_to_int() -> bool:
    """NumPy >= 2.4 raises; 1.25-2.3 only warn (a DeprecationWarning that would reach the
    verify's output from this probe), so the warning is silenced here: it says "not yet"."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            int(np.array([1]))
        except TypeError:
            return True
    return False


def fix_triton_interpreter() -> None:
    """Every fix of Triton's interpreter that this Triton needs."""
    _fix_scalar_index()
    _fix_nested_patching()
    _fix_elementwise_reduce()
    _fix_dead_overflow_checks()
    _fix_dtype_table()


def _fix_scalar_index() -> None:
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


NESTED = "triton interpreter: a nested @jit call re-patches triton.language only where needed"


def _fix_nested_patching() -> None:
    """Triton 3.6's interpreter re-patches all of ``triton.language`` (an
    ``inspect.getmembers`` of four modules) on every call of a nested ``@jit`` function,
    ``tl.cdiv`` included: once per program instance and call, about a third of a CPU
    verify. Inside one launch a module already patched stays patched until the launch
    restores it, so a nested call that sees only patched modules skips the re-patch; a
    call that sees another module (``triton.language.core`` from ``tl.cdiv``) patches it
    as before. Same patches, same builder: the kernels compute the same. Triton's own
    tools do the same (triton-viz's "nested Triton JIT calls on the raw-function fast
    path"). Applied only where the interpreter has the shape this fix knows."""
    if NESTED in APPLIED:
        return
    from triton.runtime import interpreter

    grid = getattr(interpreter, "GridExecutor", None)
    original = getattr(interpreter, "_patch_lang", None)
    scope_type = getattr(interpreter, "_LangPatchScope", None)
    if grid is None or original is None or scope_type is None:
        return
    launch_call = grid.__call__
    #: ids of the language modules patched in the launch running now; None: no launch
    patched: list[set[int] | None] = [None]

    def langs(fn: Any) -> set[int]:
        import triton.language as tl

        return {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}

    def patch_lang(fn: Any) -> Any:
        seen = patched[0]
        if seen is None:
            return original(fn)
        wanted = langs(fn)
        if wanted and wanted <= seen:
            return scope_type()
        scope = original(fn)
        seen |= wanted
        return scope

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, patched[0] = patched[0], set()
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            patched[0] = outer

    interpreter._patch_lang = patch_lang
    grid.__call__ = call
    APPLIED.append(NESTED)


REDUCE = "triton interpreter: tl.reduce with an elementwise combine runs on whole slices"
#: The ``tl`` calls a combine function may make for :func:`_fix_elementwise_reduce`:
#: elementwise, exact (no rounding that could differ between NumPy's loops).
ELEMENTWISE_CALLS = frozenset({"maximum", "minimum", "where"})
_STRAIGHT: dict[Any, bool] = {}


def straight_line_combine(fn: Any) -> bool:
    """Whether a combine function is straight-line code over elementwise operations:
    assignments and a return of names, constants, arithmetic, comparisons, attribute
    reads and ``tl.maximum``/``minimum``/``where`` calls, nothing else."""
    if fn in _STRAIGHT:
        return _STRAIGHT[fn]
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        _STRAIGHT[fn] = False
        return False
    (func,) = tree.body if len(tree.body) == 1 else (None,)
    ok = isinstance(func, ast.FunctionDef) and all(
        isinstance(stmt, ast.Assign | ast.Return | ast.Expr) for stmt in func.body
    )
    if ok and isinstance(func, ast.FunctionDef):
        for node in ast.walk(ast.Module(body=func.body, type_ignores=[])):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else None
                ok = ok and name in ELEMENTWISE_CALLS
            elif isinstance(node, ast.Lambda | ast.NamedExpr | ast.Subscript | ast.Starred):
                ok = False
    _STRAIGHT[fn] = bool(ok)
    return bool(ok)


def _fix_elementwise_reduce() -> None:
    """Triton 3.6's interpreter runs ``tl.reduce`` with a custom combine function one
    element at a time: a ``[128, 64]`` tile makes 8,192 interpreted calls of the
    combine function. For a combine function that is straight-line elementwise code
    (:func:`straight_line_combine`), calling it once per position along the axis on
    whole slices computes every output element from the same values in the same order
    (``((x0 . x1) . x2) ...``), which is what the interpreter's loop does element by
    element. Any other combine function keeps the interpreter's loop."""
    if REDUCE in APPLIED:
        return
    from triton.runtime import interpreter

    ops = getattr(interpreter, "ReduceOps", None)
    original = getattr(ops, "generic_reduce", None)
    if ops is None or original is None or not hasattr(ops, "unravel"):
        return

    def generic_reduce(self: Any, input: Any) -> Any:
        fn = getattr(self.combine_fn, "fn", None)
        if fn is None or not straight_line_combine(fn):
            return original(self, input)
        return _reduce_slices(self, fn, input) or original(self, input)

    ops.generic_reduce = generic_reduce
    APPLIED.append(REDUCE)


def _reduce_slices(self: Any, fn: Any, input: Any) -> list[Any] | None:
    """The interpreter's generic reduce, one combine call per position along the axis."""
    import numpy as np

    original_axis = self.axis
    unravelled, axis = self.unravel(input, self.axis)
    datas = [arg.handle.data for arg in unravelled]
    shape = datas[0].shape
    if not shape or shape[axis] == 0:
        return None
    out_shape = shape[:axis] + shape[axis + 1 :]
    dtypes = [arg.dtype for arg in unravelled]
    acc = [np.take(d, 0, axis=axis).astype(d.dtype) for d in datas]
    for k in range(1, shape[axis]):
        args = [self.to_tensor(a, dt) for a, dt in zip(acc, dtypes, strict=True)]
        args += [
            self.to_tensor(np.take(d, k, axis=axis), dt)
            for d, dt in zip(datas, dtypes, strict=True)
        ]
        ret = fn(*args)
        ret = ret if isinstance(ret, tuple) else (ret,)
        acc = [_slice_of(r, d.dtype, out_shape) for r, d in zip(ret, datas, strict=True)]
    out = []
    for data, dt in zip(acc, dtypes, strict=True):
        if self.keep_dims:
            if original_axis is not None:
                data = np.expand_dims(data, axis)
            else:
                for _ in range(len(shape)):
                    data = np.expand_dims(data, 0)
        elif original_axis is None:
            data = data.item()
        out.append(self.to_tensor(data, dt))
    return out


def _slice_of(value: Any, dtype: Any, shape: tuple[int, ...]) -> Any:
    """A combine function's result as the accumulator's array (a scalar broadcast)."""
    import numpy as np

    data = np.asarray(value.handle.data if hasattr(value, "handle") else value).astype(dtype)
    return np.broadcast_to(data.reshape(()) if data.size == 1 else data, shape).copy()


OVERFLOW = "triton interpreter: no overflow check computed where no assert can fire"


def _fix_dead_overflow_checks() -> None:
    """Triton 3.6's interpreter computes the int32 overflow check of every ``+``, ``-``
    and ``*`` (casts to int64, the operation again, two comparisons) and hands it to
    ``device_assert``, which drops it unless the options' ``debug`` is set, and the
    interpreter's never is: about a third of a CPU verify spent on a check that cannot
    fire. With the interpreter's builder and ``debug`` off, the check is skipped; a
    compiled kernel (the TTIR probes) and a debug build keep Triton's own code."""
    if OVERFLOW in APPLIED:
        return
    from triton.language import semantic
    from triton.runtime import interpreter

    cls = getattr(semantic, "TritonSemantic", None)
    original = getattr(cls, "binary_op_sanitize_overflow_impl", None)
    builder_type = getattr(interpreter, "InterpreterBuilder", None)
    if cls is None or original is None or builder_type is None:
        return

    def sanitize(self: Any, lhs: Any, rhs: Any, binary_op: Any) -> Any:
        builder = self.builder
        if isinstance(builder, builder_type) and not getattr(builder.options, "debug", True):
            return None
        return original(self, lhs, rhs, binary_op)

    cls.binary_op_sanitize_overflow_impl = sanitize
    APPLIED.append(OVERFLOW)


DTYPES = "triton interpreter: the NumPy dtype of a Triton type looked up, not rebuilt"


def _fix_dtype_table() -> None:
    """Triton 3.6's interpreter builds a table of 18 NumPy dtypes on every lookup of a
    Triton type's NumPy dtype (``_get_np_dtype``, a few times per operation): a tenth of
    a CPU verify. Its answer depends on the scalar type alone (a pointer, or the type
    itself; a block's element type), and scalar types are equal by name, so each
    name's answer is computed by Triton's own function once and then looked up."""
    if DTYPES in APPLIED:
        return
    import triton.language as tl
    from triton.runtime import interpreter

    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None:
        return
    known: dict[str, Any] = {}

    def get_np_dtype(tt_dtype: Any) -> Any:
        scalar = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        name = getattr(scalar, "name", None)
        if not isinstance(name, str):
            return original(tt_dtype)
        found = known.get(name)
        if found is None:
            found = known[name] = original(tt_dtype)
        return found

    interpreter._get_np_dtype = get_np_dtype
    APPLIED.append(DTYPES)
