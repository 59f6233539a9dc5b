# SPDX-License-Identifier: Apache-2.0
"""The registered defects' own minimal inputs, run (``probe`` in ../known-defects.toml).

When a test expected to show a known defect passes, bakery's plugin calls the defect's
probe: None when the defect's input now gives the right answer (the defect is gone),
else what it gives instead (the test passed for another reason). Each probe is the
entry's ``input``, word for word, with the single-rank answer as the truth.
"""

from typing import Any

import torch
from dcp2_support import dcp_group, load_kernel

cb = load_kernel()
INF = float("inf")


def mask_past_width(ctx: Any) -> str | None:
    """5 states, global block 4, world 2, candidates [[1]]: rank 1 (states 1 and 3,
    local block 2) must keep nothing, as the single-rank mask keeps only state 4."""
    dev = torch.device(ctx.device)
    logits = torch.arange(1.0, 6.0).view(1, 5)
    candidates = torch.tensor([[1]], dtype=torch.int32, device=dev)
    whole = logits.to(dev, copy=True)
    cb.apply_candidate_mask(
        whole, None, torch.tensor([5], dtype=torch.int32, device=dev), candidates, 4
    )
    truth = whole.cpu()[0, [1, 3]].tolist()
    local = logits[:, [1, 3]].to(dev, copy=True)
    cb.apply_candidate_mask(
        local, None, torch.tensor([2], dtype=torch.int32, device=dev), candidates, 2
    )
    got = local.cpu()[0].tolist()
    return None if got == truth else f"rank 1 keeps {got}, the single-rank mask {truth}"


#: The NaN input: decode rows of 21 states, global block 4, one NaN on rank 1 in block 1.
STATES, BLOCK, WORLD, NAN_STATE = 21, 4, 2, 5


def _nan_logits() -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    logits = torch.stack([torch.randperm(STATES, generator=gen).float() for _ in range(2)])
    logits[:, NAN_STATE] = float("nan")  # state 5: block 1, on rank 5 % 2 == 1
    return logits


def _nan_on_rank(ctx: Any, logits: torch.Tensor) -> list[list[int]]:
    dev = ctx.device
    local = logits[:, ctx.rank :: WORLD].contiguous()
    rows, nblocks = logits.shape[0], -(-STATES // BLOCK)
    out = torch.full((rows, nblocks), -7, dtype=torch.int32, device=dev)
    cb.select_candidate_blocks(
        local.to(dev),
        None,
        torch.tensor([local.shape[1]], dtype=torch.int32, device=dev),
        nblocks,
        BLOCK // WORLD,
        out,
        rows,
        dcp_group=dcp_group(ctx),
        global_row_ke=torch.tensor([STATES], dtype=torch.int32, device=dev),
        global_block_size=BLOCK,
        max_global_blocks=nblocks,
    )
    return out.cpu().tolist()


def nan_max_reduce(ctx: Any) -> str | None:
    """World 2: every rank's DCP selection must be the single-rank selection."""
    dev = torch.device(ctx.device)
    logits = _nan_logits()
    rows, nblocks = logits.shape[0], -(-STATES // BLOCK)
    single = torch.full((rows, nblocks), -7, dtype=torch.int32, device=dev)
    ends = torch.tensor([STATES], dtype=torch.int32, device=dev)
    cb.select_candidate_blocks(logits.to(dev), None, ends, nblocks, BLOCK, single, rows)
    truth = single.cpu().tolist()
    wrong = [
        f"rank {rank} selects {got}"
        for rank, got in enumerate(ctx.rank_pool(WORLD).run(_nan_on_rank, logits))
        if got != truth
    ]
    return None if not wrong else f"single rank selects {truth}; " + "; ".join(wrong)
