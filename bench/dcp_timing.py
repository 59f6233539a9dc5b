"""Time the baked kernel's DCP path (two ranks) against its single-rank path.

    python bench/dcp_timing.py --tree BAKED_TREE [--interpret]

On a GPU machine the ranks use NCCL when there are two GPUs, else gloo with both ranks
on one GPU (then the all-reduce goes through the host and the DCP figure is an upper
bound). With --interpret the shapes are shrunk so the Triton interpreter finishes.
Both paths run in the same rank processes, so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

MODULE = "vllm.model_executor.kernels.attention.dsa.candidate_blocks"
#: name: (rows, global width, global block, top-k blocks, row_repeat)
SHAPES = {
    "decode": (64, 131072, 64, 32, 1),
    "decode-mtp": (256, 131072, 64, 32, 4),
    "prefill": (4096, 32768, 64, 32, 1),
}
SMALL = {"decode": (4, 2048, 64, 8, 1), "prefill": (64, 1024, 64, 8, 1)}


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Any, device: Any, reps: int) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def task(ctx: Any, shape: tuple[int, int, int, int, int], reps: int) -> dict[str, float]:
    """On every rank: single-rank path on the global logits, DCP path on this rank's shard."""
    import torch

    from bakery.testing import load_tree_module

    cb = load_tree_module(MODULE)
    rows, width, gblock, topk, repeat = shape
    world, rank, dev = ctx.world_size, ctx.rank, ctx.device
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(rows, width, generator=gen).to(dev)
    groups = rows // repeat
    ends = torch.randint(width // 2, width + 1, (groups,), generator=gen).to(torch.int32).to(dev)
    out = torch.empty(rows, topk, dtype=torch.int32, device=dev)
    single = _time(
        lambda: cb.select_candidate_blocks(logits, None, ends, topk, gblock, out, repeat), dev, reps
    )
    # interleave 1: global column c lives on rank c % world at local column c // world
    local = logits[:, rank::world].contiguous()
    local_ends = ((ends - rank + world - 1).clamp_(min=0) // world).to(torch.int32)
    nblocks = (width + gblock - 1) // gblock
    dcp = _time(
        lambda: cb.select_candidate_blocks(
            local,
            None,
            local_ends,
            topk,
            gblock // world,
            out,
            repeat,
            dcp_group=ctx.dcp_group,
            global_row_ke=ends,
            global_block_size=gblock,
            max_global_blocks=nblocks,
        ),
        dev,
        reps,
    )
    return {"single_ms": single, "dcp_ms": dcp}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tree", required=True, type=Path)
    ap.add_argument("--interpret", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    os.environ["BAKERY_TREE"] = str(args.tree.resolve())
    from bakery.testing.dist import RankPool

    shapes = SMALL if args.interpret else SHAPES
    with RankPool(2, timeout=600) as pool:
        print(f"backend {pool.backend if hasattr(pool, 'backend') else '?'}; tree {args.tree}")
        print(
            f"{'shape':12} {'rows':>6} {'width':>7} {'single ms':>10} {'dcp2 ms':>9} "
            f"{'dcp/single':>10}"
        )
        for name, shape in shapes.items():
            res = pool.run(task, shape, 3 if args.interpret else args.reps)
            single = res[0]["single_ms"]
            dcp = max(r["dcp_ms"] for r in res)
            print(
                f"{name:12} {shape[0]:>6} {shape[1]:>7} {single:>10.3f} {dcp:>9.3f} "
                f"{dcp / single:>10.2f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
