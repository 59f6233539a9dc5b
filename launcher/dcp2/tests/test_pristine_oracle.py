# SPDX-License-Identifier: Apache-2.0
"""The pristine release as the oracle where the series promises upstream's behaviour.

Without DCP (one rank), the dcp2 diff promises that selection and mask are upstream's:
the baked kernel's outputs must equal the pristine release's kernel's, bit for bit, on
the same inputs, ties, NaN and -inf included. Both kernels run in this session, each
loaded from its own tree (the pristine one: ``pristine_tree``, bakery's cached release).
The candidates masked are those the selection emits (blocks of each row's context).
"""

import importlib.util
import inspect
import random
import sys

import pytest
import torch
from dcp2_support import MODULE, load_kernel

cb = load_kernel()
INF = float("inf")
NAN = float("nan")
UNWRITTEN = -7


#: Upstream's CUDA-only guard; under the interpreter (CPU tensors) it is relaxed as the
#: dcp2 diff relaxes it (``_cpu_kernels_allowed``): the only line of upstream not run.
CUDA_GUARD = "assert logits.is_cuda\n"


@pytest.fixture(scope="module")
def upstream(pristine_tree, interpret, tmp_path_factory):
    """The pristine release's candidate-block module (its dependencies: the session's)."""
    if pristine_tree is None:
        pytest.fail("no pristine tree of the bake's release: pass --bakery-pristine DIR")
    path = pristine_tree.joinpath(*MODULE.split(".")).with_suffix(".py")
    if interpret:
        text = path.read_text()
        assert CUDA_GUARD in text, "upstream's guard moved: update CUDA_GUARD"
        path = tmp_path_factory.mktemp("pristine") / path.name
        path.write_text(text.replace(CUDA_GUARD, "assert logits.is_cuda or True\n"))
    name = "_dcp2_pristine_candidate_blocks"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Triton's JIT looks its functions' module up
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # bakery's cache: read only
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


def _takes_score_dtype(module) -> bool:
    fn = getattr(module, "_select_candidate_blocks_impl", module.select_candidate_blocks)
    return "score_dtype" in inspect.signature(fn).parameters


def make_inputs(seed: int, dtype, device):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    row_repeat = rng.choice([1, 2, 3])
    groups = rng.randint(1, 4)
    rows = groups * row_repeat - rng.randint(0, row_repeat - 1)
    width = rng.choice([1, 7, 33, 64, 130])
    block_size = rng.choice([1, 2, 3, 4, 8])
    with_starts = rng.random() < 0.5
    starts, ends = [], []
    for _ in range(groups):
        start = rng.randint(0, width // 2) if with_starts else 0
        ends.append(rng.choice([start, width, rng.randint(start, width), width + 5]))
        starts.append(start)
    logits = torch.randint(-3, 4, (rows, width)).float()  # ties
    logits[torch.rand(rows, width) < 0.15] = -INF
    logits[torch.rand(rows, width) < 0.05] = NAN
    ks = torch.tensor(starts, dtype=torch.int32, device=device) if with_starts else None
    ke = torch.tensor(ends, dtype=torch.int32, device=device)
    topk = rng.choice([1, 3, 8, 64])
    return logits.to(dtype).to(device), ks, ke, topk, block_size, row_repeat


def run(module, logits, ks, ke, topk, block_size, row_repeat, score_dtype):
    out = torch.full((logits.shape[0], topk), UNWRITTEN, dtype=torch.int32, device=logits.device)
    kw = {"score_dtype": score_dtype} if score_dtype is not None else {}
    module.select_candidate_blocks(logits, ks, ke, topk, block_size, out, row_repeat, **kw)
    masked = logits.clone()
    module.apply_candidate_mask(masked, ks, ke, out, block_size, row_repeat)
    return out.cpu(), masked.cpu()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@torch.inference_mode()
def test_one_rank_equals_the_pristine_release(seed, dtype, upstream, device):
    """Selection and mask without DCP: the pristine release's, exactly."""
    args = make_inputs(seed, dtype, device)
    score_dtypes = [None]
    if _takes_score_dtype(upstream):
        assert _takes_score_dtype(cb), "the release has score_dtype; the bake lost it"
        score_dtypes.append(torch.float16 if dtype == torch.float32 else torch.float32)
    for score_dtype in score_dtypes:
        out, masked = run(cb, *args, score_dtype)
        want_out, want_masked = run(upstream, *args, score_dtype)
        assert out.tolist() == want_out.tolist(), f"selection (score_dtype {score_dtype})"
        same = (masked == want_masked) | (masked.isnan() & want_masked.isnan())
        assert bool(same.all()), f"mask (score_dtype {score_dtype})"
