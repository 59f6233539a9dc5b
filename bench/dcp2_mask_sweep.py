"""Sweep the dcp2 mask under DCP against the single-rank mask (issue 15's sweep).

    python bench/dcp2_mask_sweep.py --tree BAKED_TREE [--world 2 4] [--padded]

One decode row per case: a request of N states (1-40), global block G (2/4/8/16, those
divisible by the world size), one global block b selected. The single-rank mask of the
global logits with G is the truth; each rank masks its own interleaved shard (global
state t on rank t % world) with the LOCAL block G // world and the same candidate, as the
diff's docstring says. A row diverges when some rank's masked shard differs from its
share of the global mask. Local widths are unpadded (each rank holds exactly its states),
or with ``--padded`` as wide as rank 0's (vLLM 0.30.0's wiring pads at least that much).
Runs the kernels under Triton's interpreter on the CPU; prints one line per world size.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

MODULE = "vllm.model_executor.kernels.attention.dsa.candidate_blocks"
GLOBAL_BLOCKS = (2, 4, 8, 16)


def sweep(cb: object, world: int, padded: bool) -> tuple[int, int, list[str]]:
    import torch

    rows_total, diverging, examples = 0, 0, []
    inf = float("inf")
    for g in GLOBAL_BLOCKS:
        if g % world:
            continue
        for n in range(1, 41):
            nblocks = -(-n // g)
            logits = torch.randn(1, n).repeat(nblocks, 1)  # row b selects block b
            candidates = torch.arange(nblocks, dtype=torch.int32).view(-1, 1)
            ends = torch.full((nblocks,), n, dtype=torch.int32)
            masked = logits.clone()
            cb.apply_candidate_mask(masked, None, ends, candidates, g)  # type: ignore[attr-defined]
            bad = torch.zeros(nblocks, dtype=torch.bool)
            width0 = len(range(0, n, world))
            for rank in range(world):
                cols = list(range(rank, n, world))
                width = width0 if padded else len(cols)
                local = torch.full((nblocks, width), -inf)
                local[:, : len(cols)] = logits[:, cols]
                local_ends = torch.full((nblocks,), len(cols), dtype=torch.int32)
                cb.apply_candidate_mask(  # type: ignore[attr-defined]
                    local, None, local_ends, candidates, g // world
                )
                want = torch.full((nblocks, width), -inf)
                want[:, : len(cols)] = masked[:, cols]
                differs = (local != want).any(dim=1)
                for b in differs.nonzero().flatten().tolist():
                    if len(examples) < 4 and not bad[b]:
                        examples.append(f"N={n} G={g} block {b} (rank {rank} width {width})")
                bad |= differs
            rows_total += nblocks
            diverging += int(bad.sum())
    return diverging, rows_total, examples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, type=Path)
    parser.add_argument("--world", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--padded", action="store_true")
    args = parser.parse_args()
    os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from bakery.testing import load_tree_module

    torch.manual_seed(0)
    cb = load_tree_module(MODULE, args.tree)
    for world in args.world:
        bad, total, examples = sweep(cb, world, args.padded)
        widths = "padded to rank 0's width" if args.padded else "unpadded"
        print(f"world {world}, {widths}: {bad} of {total} rows diverge", flush=True)
        for e in examples:
            print(f"  e.g. {e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
