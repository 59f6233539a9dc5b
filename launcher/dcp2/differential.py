"""Recorded inputs for `bakery port`'s differential check (bakery.porting.differential).

The same seeded inputs go through `select_candidate_blocks` and `apply_candidate_mask`
of two baked trees (the previous release's and a proposed port); every output must be
equal, or explained for the target release in differential.toml. Single-rank calls and
the DCP path on a one-rank gloo group (its reduce is then the identity, so it must give
the single-rank answer). No NaN inputs: releases differ there by design (0.32.0 selects
NaN-scored blocks, 0.30.0 drops them) and the bundled tests cover that per release.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MODULE = "vllm.model_executor.kernels.attention.dsa.candidate_blocks"

#: (rows, width, block_size, topk_blocks, row_repeat, with_starts)
SHAPES = [
    (1, 1, 4, 2, 1, False),
    (3, 37, 4, 3, 1, True),
    (4, 64, 8, 4, 2, False),
    (8, 130, 16, 5, 1, True),
    (6, 257, 32, 8, 3, False),
    (2, 1024, 64, 16, 1, True),
]


@dataclass
class _Group:
    world_size: int
    rank_in_group: int
    device_group: Any


def _one_rank_group() -> _Group:
    if not torch.distributed.is_initialized():
        store = torch.distributed.FileStore(tempfile.mktemp(prefix="bakery-diff-"), 1)
        torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    return _Group(1, 0, torch.distributed.group.WORLD)


def _inputs(seed: int, rows: int, width: int, repeat: int, with_starts: bool):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, width, generator=g)
    logits[torch.rand(rows, width, generator=g) < 0.1] = -float("inf")
    groups = -(-rows // repeat)
    ends = torch.randint(0, width + 1, (groups,), generator=g, dtype=torch.int32)
    starts = None
    if with_starts:
        starts = (torch.rand(groups, generator=g) * ends.float()).to(torch.int32)
    return logits, starts, ends


def load(module: str) -> Any:
    """The kernel module of the tree under test, with the stand-ins the bundled tests
    declare (DeepSelect has no CPU build): the same module verify loads."""
    sys.path.insert(0, str(Path(__file__).parent / "tests"))
    from dcp2_support import load_kernel

    return load_kernel()


def cases(cb: Any) -> Iterator[tuple[str, Any]]:
    group = _one_rank_group()
    for i, (rows, width, block, topk, repeat, with_starts) in enumerate(SHAPES):
        logits, starts, ends = _inputs(1000 + i, rows, width, repeat, with_starts)
        name = f"r{rows}-w{width}-b{block}-k{topk}-rep{repeat}-s{int(with_starts)}"
        out = torch.full((rows, topk), -7, dtype=torch.int32)
        cb.select_candidate_blocks(logits, starts, ends, topk, block, out, repeat)
        yield f"select/{name}", out.clone()
        masked = logits.clone()
        cb.apply_candidate_mask(masked, starts, ends, out, block, repeat)
        yield f"mask/{name}", masked
        if group is not None and os.environ.get("BAKERY_DIFF_NO_DCP") != "1":
            dcp_out = torch.full((rows, topk), -7, dtype=torch.int32)
            nblocks = max(1, -(-width // block))
            try:
                cb.select_candidate_blocks(
                    logits,
                    starts,
                    ends,
                    topk,
                    block,
                    dcp_out,
                    repeat,
                    dcp_group=group,
                    global_row_ke=ends,
                    global_block_size=block,
                    max_global_blocks=nblocks,
                )
            except TypeError as e:  # a tree without the DCP path
                yield f"dcp-select/{name}", f"no DCP path: {e}"
                continue
            yield f"dcp-select/{name}", dcp_out
