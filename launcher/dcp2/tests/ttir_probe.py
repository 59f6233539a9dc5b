# SPDX-License-Identifier: Apache-2.0
"""Compile the tree's block-score kernel to Triton IR (TTIR) on the CPU; print the float
max operations it reduces with.

    BAKERY_TREE=DIR python ttir_probe.py

Run by test_candidate_blocks.py in a process of its own: the Triton interpreter (the
tests' process) runs kernels with numpy.maximum whatever ``propagate_nan`` says, so only
the compiled kernel shows whether its block max propagates NaN. TTIR is made for an
sm_90 target without a GPU or a driver (no PTX, nothing runs).
"""

import os
import sys

os.environ.pop("TRITON_INTERPRET", None)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dcp2_support import load_kernel  # noqa: E402
from triton._C.libtriton import ir  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402

CONSTEXPRS = {
    "BLOCK_SIZE": 4,
    "HAS_STARTS": True,
    "ROW_REPEAT": 1,
    "TILE": 128,
    "PIN_NEWEST": True,
    "FULL_WIDTH": True,
}
POINTERS = {
    "logits": "*fp32",
    "scores": "*fp32",
    "starts": "*i32",
    "ends": "*i32",
    "valid_blocks": "*i32",
}


def main() -> None:
    kernel = load_kernel()._block_scores_kernel
    consts = {n: v for n, v in CONSTEXPRS.items() if n in kernel.arg_names}
    signature = {
        n: "constexpr" if n in consts else POINTERS.get(n, "i32") for n in kernel.arg_names
    }
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    source = ASTSource(
        kernel, signature, {(kernel.arg_names.index(n),): v for n, v in consts.items()}
    )
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(
        target,
        options,
        backend.get_codegen_implementation(options),
        backend.get_module_map(),
        context,
    )
    text = str(module)
    for op in ("arith.maximumf", "arith.maxnumf"):
        print(op, text.count(op))


if __name__ == "__main__":
    main()
