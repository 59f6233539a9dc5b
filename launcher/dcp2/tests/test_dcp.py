# SPDX-License-Identifier: Apache-2.0
"""The DCP path of the baked candidate-block selection, over real ranks.

With interleave 1, global token ``t`` of a request lives on rank ``t % world`` at
local position ``t // world``, so local block ``b`` (``global_block // world`` states)
on every rank holds that rank's states of global block ``b``. A global problem is
split into per-rank shards that way; every rank's DCP output must equal the
single-rank output on the global logits with the global block size.
"""

import random
from dataclasses import dataclass

import pytest
import torch

from bakery.testing import load_tree_module

cb = load_tree_module("vllm.model_executor.kernels.attention.dsa.candidate_blocks")

WORLD_SIZE = 2
GLOBAL_BLOCK_SIZES = [2, 8]
ROW_REPEATS = [1, 3]
WITH_STARTS = [False, True]
#: Rows per all-reduce slice, set through the scratch cap (None: the release's cap).
SLICE_ROWS = [None, 1, 2]
SEEDS = [0, 1]
UNWRITTEN = -7
#: Logits outside every row's bounds: large, so that reading them shows.
GARBAGE = 1e6


def on_rank(count: int, rank: int) -> int:
    """How many of a request's first ``count`` states live on ``rank``."""
    return len(range(rank, count, WORLD_SIZE))


@dataclass
class Shard:
    """One rank's view: local packed logits and bounds."""

    logits: torch.Tensor
    row_ks: torch.Tensor | None
    row_ke: torch.Tensor
    #: The global column of each local column; -1 for local padding.
    cols: list[int]


@dataclass
class Problem:
    logits: torch.Tensor
    row_ks: torch.Tensor | None
    row_ke: torch.Tensor
    #: Global context per row group (``global_row_ke``), with a stray trailing entry.
    lengths: torch.Tensor
    block_size: int
    row_repeat: int
    max_global_blocks: int
    shards: list[Shard]

    @property
    def rows(self) -> int:
        return self.logits.shape[0]


def make_problem(
    rng: random.Random,
    *,
    rows: int,
    row_repeat: int,
    with_starts: bool,
    block_size: int,
    values: str = "distinct",
    blocks: str = "needed",
    request_lengths: list[int] | None = None,
    local_pads: list[int] | None = None,
    neg_inf: float = 0.0,
) -> Problem:
    """A global problem and its shards.

    With starts, the packed columns hold 1-3 requests back to back (prefill); without,
    every row's columns start at 0 (decode). Row groups take their request's full
    context, none, or a part; lengths near block boundaries are favoured.
    ``blocks``: ``max_global_blocks`` is what the rows need, or the global width's
    block count (then the DCP scores have the single-rank shape: ties match exactly).
    ``neg_inf``: the share of logits that are -inf, so that some blocks are -inf on
    one rank and finite on the other, or -inf everywhere (then unselected).
    """
    g = block_size
    near = [1, 2, g - 1, g, g + 1, 2 * g, 2 * g + 1, 3 * g - 1, 4 * g, rng.randint(1, 5 * g)]
    near = [n for n in near if n > 0]
    if request_lengths is None:
        count = rng.randint(1, 3) if with_starts else 1
        request_lengths = [rng.choice(near) for _ in range(count)]
    starts = [sum(request_lengths[:q]) for q in range(len(request_lengths))]
    groups = -(-rows // row_repeat)
    picks, lengths = [], []
    for group in range(groups):
        q = rng.randrange(len(request_lengths))
        full = request_lengths[q]
        length = rng.choice([0, full, rng.randint(0, full), min(full, rng.choice(near))])
        if groups >= 3 and group == 1:
            length = 0  # rows without context
        if groups >= 3 and group == 2:
            length = full
        picks.append(q)
        lengths.append(length)
    packed = sum(request_lengths)
    width = packed + rng.randint(0, g)

    if values == "distinct":
        logits = torch.randperm(rows * width).float().view(rows, width)
    elif values == "ties":
        logits = torch.randint(0, 3, (rows, width)).float()
    else:
        logits = torch.randn(rows, width)
    logits[torch.rand(rows, width) < neg_inf] = -float("inf")
    logits[:, packed:] = GARBAGE
    for row in range(rows):
        group = row // row_repeat
        lo = starts[picks[group]] if with_starts else 0
        logits[row, :lo] = GARBAGE
        logits[row, lo + lengths[group] :] = GARBAGE

    def as_int32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32)

    shards = []
    for rank in range(WORLD_SIZE):
        local_starts, cols = [], []
        for start, count in zip(starts, request_lengths, strict=True):
            local_starts.append(len(cols))
            cols.extend(start + t for t in range(rank, count, WORLD_SIZE))
        pad = local_pads[rank] if local_pads is not None else rng.randint(0, 2 * g // WORLD_SIZE)
        cols.extend([-1] * pad)
        local = torch.full((rows, len(cols)), GARBAGE)
        real = [j for j, col in enumerate(cols) if col >= 0]
        local[:, real] = logits[:, [cols[j] for j in real]]
        ks = [local_starts[picks[group]] for group in range(groups)]
        ke = [ks[group] + on_rank(lengths[group], rank) for group in range(groups)]
        shards.append(Shard(local, as_int32(ks) if with_starts else None, as_int32(ke), cols))

    global_ks = [starts[picks[group]] for group in range(groups)]
    global_ke = [global_ks[group] + lengths[group] for group in range(groups)]
    needed = max(-(-n // g) for n in lengths)
    max_global_blocks = needed if blocks == "needed" else -(-width // g)
    return Problem(
        logits=logits,
        row_ks=as_int32(global_ks) if with_starts else None,
        row_ke=as_int32(global_ke),
        lengths=as_int32([*lengths, 10**6]),
        block_size=g,
        row_repeat=row_repeat,
        max_global_blocks=max_global_blocks,
        shards=shards,
    )


def select_single_rank(problem: Problem, topk_blocks: int, device: torch.device) -> torch.Tensor:
    out = torch.full((problem.rows, topk_blocks), UNWRITTEN, dtype=torch.int32, device=device)
    cb.select_candidate_blocks(
        problem.logits.to(device),
        problem.row_ks.to(device) if problem.row_ks is not None else None,
        problem.row_ke.to(device),
        topk_blocks,
        problem.block_size,
        out,
        problem.row_repeat,
    )
    return out.cpu()


def select_on_rank(ctx, problem: Problem, topk_blocks: int, reduce_bytes: int | None):
    """Rank task: the DCP selection on this rank's shard, and the all-reduces it made."""
    import torch.distributed as dist

    shard = problem.shards[ctx.rank]
    dev = ctx.device
    calls = []
    all_reduce = dist.all_reduce

    def spy(tensor, *args, **kwargs):
        group = kwargs["group"] if "group" in kwargs else (args[1:2] or [None])[0]
        ours = group is ctx.dcp_group.device_group
        calls.append((tuple(tensor.shape), tensor.element_size(), ours))
        return all_reduce(tensor, *args, **kwargs)

    cap = cb._DCP_REDUCE_BYTES
    dist.all_reduce = spy
    if reduce_bytes is not None:
        cb._DCP_REDUCE_BYTES = reduce_bytes
    try:
        out = torch.full((problem.rows, topk_blocks), UNWRITTEN, dtype=torch.int32, device=dev)
        cb.select_candidate_blocks(
            shard.logits.to(dev),
            shard.row_ks.to(dev) if shard.row_ks is not None else None,
            shard.row_ke.to(dev),
            topk_blocks,
            problem.block_size // ctx.world_size,
            out,
            problem.row_repeat,
            dcp_group=ctx.dcp_group,
            global_row_ke=problem.lengths.to(dev),
            global_block_size=problem.block_size,
            max_global_blocks=problem.max_global_blocks,
        )
    finally:
        dist.all_reduce = all_reduce
        cb._DCP_REDUCE_BYTES = cap
    return out.cpu(), calls


def refuses_local_block_size_mismatch(ctx, problem: Problem) -> bool:
    shard = problem.shards[ctx.rank]
    out = torch.full((problem.rows, 2), UNWRITTEN, dtype=torch.int32, device=ctx.device)
    with pytest.raises(AssertionError):
        cb.select_candidate_blocks(
            shard.logits.to(ctx.device),
            shard.row_ks.to(ctx.device) if shard.row_ks is not None else None,
            shard.row_ke.to(ctx.device),
            2,
            problem.block_size,  # the global block size where the local one belongs
            out,
            problem.row_repeat,
            dcp_group=ctx.dcp_group,
            global_row_ke=problem.lengths.to(ctx.device),
            global_block_size=problem.block_size,
            max_global_blocks=problem.max_global_blocks,
        )
    return True


@pytest.fixture
def ranks(rank_pool):
    return rank_pool(WORLD_SIZE)


def slice_cap(slice_rows: int | None, problem: Problem) -> int | None:
    """A scratch cap that yields ``slice_rows`` rows per slice, as large as allowed."""
    if slice_rows is None:
        return None
    row_bytes = max(problem.max_global_blocks, 1) * 4
    return slice_rows * row_bytes + row_bytes - 1


def check_dcp(ranks, problem: Problem, topk_blocks: int, reduce_bytes, device) -> None:
    task = ranks.submit(select_on_rank, [(problem, topk_blocks, reduce_bytes)] * WORLD_SIZE)
    expected = select_single_rank(problem, topk_blocks, device)
    results = ranks.gather(task)

    nblocks = max(problem.max_global_blocks, 1)
    cap = cb._DCP_REDUCE_BYTES if reduce_bytes is None else reduce_bytes
    per_slice = max(1, cap // (nblocks * 4))
    for rank, (out, calls) in enumerate(results):
        torch.testing.assert_close(
            out, expected, rtol=0, atol=0, msg=lambda m, rank=rank: f"rank {rank}: {m}"
        )
        # One [slice, max_global_blocks] fp32 all-reduce per slice, within the cap,
        # over the DCP group.
        assert all(ours for _, _, ours in calls), "all-reduce outside the DCP group"
        assert [shape[1:] for shape, _, _ in calls] == [(nblocks,)] * len(calls)
        assert sum(shape[0] for shape, _, _ in calls) == problem.rows
        assert len(calls) == -(-problem.rows // per_slice)
        assert all(s[0] * s[1] * size <= max(cap, nblocks * size) for s, size, _ in calls)
    assert all(calls == results[0][1] for _, calls in results)


@pytest.mark.parametrize("block_size", GLOBAL_BLOCK_SIZES)
@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("slice_rows", SLICE_ROWS)
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_dcp_matches_single_rank(
    block_size, row_repeat, with_starts, slice_rows, seed, ranks, device
):
    rng = random.Random(seed * 1000 + block_size * 10 + row_repeat)
    torch.manual_seed(seed)
    problem = make_problem(
        rng,
        rows=rng.randint(2, 11),
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block_size,
        blocks=rng.choice(["needed", "width"]),
        neg_inf=rng.choice([0.0, 0.0, 0.4]),
    )
    nblocks = max(problem.max_global_blocks, 1)
    topk_blocks = rng.choice([1, 2, 3, nblocks, nblocks + 3])
    check_dcp(ranks, problem, topk_blocks, slice_cap(slice_rows, problem), device)


@pytest.mark.parametrize("block_size", GLOBAL_BLOCK_SIZES)
@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("seed", [0])
@torch.inference_mode()
def test_dcp_ties(block_size, row_repeat, with_starts, seed, ranks, device):
    """Tied block scores: the DCP scores have the single-rank shape, so top-k's tie
    order must be the same."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    problem = make_problem(
        rng,
        rows=7,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block_size,
        values="ties",
        blocks="width",
    )
    check_dcp(ranks, problem, 3, slice_cap(2, problem), device)


@pytest.mark.parametrize("block_size", [2, 4])
@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("slice_rows", [None, 1])
@torch.inference_mode()
def test_dcp_empty_local_shard(block_size, row_repeat, with_starts, slice_rows, ranks, device):
    """Requests of one state each: rank 1 holds no column at all (width 0)."""
    rng = random.Random(block_size)
    torch.manual_seed(0)
    problem = make_problem(
        rng,
        rows=5,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block_size,
        request_lengths=[1, 1, 1] if with_starts else [1],
        local_pads=[1, 0],
    )
    assert problem.shards[1].logits.shape[1] == 0
    check_dcp(ranks, problem, 2, slice_cap(slice_rows, problem), device)


@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("slice_rows", [None, 1])
@torch.inference_mode()
def test_dcp_one_column_local_shard(row_repeat, with_starts, slice_rows, ranks, device):
    """Rank 1 holds a single column, and every finite logit: rank 0's are all -inf."""
    rng = random.Random(1)
    torch.manual_seed(0)
    problem = make_problem(
        rng,
        rows=6,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=2,
        request_lengths=[1, 3] if with_starts else [3],
        local_pads=[0, 0],
    )
    assert problem.shards[1].logits.shape[1] == 1
    for col in problem.shards[0].cols:
        problem.logits[:, col] = -float("inf")
    problem.shards[0].logits.fill_(-float("inf"))
    check_dcp(ranks, problem, 2, slice_cap(slice_rows, problem), device)


@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@torch.inference_mode()
def test_dcp_no_context_anywhere(row_repeat, ranks, device):
    """Zero-width logits on every rank and no context: max_global_blocks is 0."""
    problem = make_problem(
        random.Random(0),
        rows=4,
        row_repeat=row_repeat,
        with_starts=False,
        block_size=4,
        request_lengths=[0],
        local_pads=[0, 0],
    )
    assert problem.max_global_blocks == 0 and problem.logits.shape[1] <= 4
    problem.logits = problem.logits[:, :0]
    check_dcp(ranks, problem, 3, None, device)


@torch.inference_mode()
def test_dcp_zero_rows(ranks, device):
    """No rows: nothing to reduce, so no collective (every rank returns at once)."""
    problem = make_problem(random.Random(0), rows=1, row_repeat=1, with_starts=True, block_size=4)
    problem.logits = problem.logits[:0]
    for shard in problem.shards:
        shard.logits = shard.logits[:0]
    for out, calls in ranks.run(select_on_rank, problem, 3, None):
        assert out.shape == (0, 3) and calls == []


@torch.inference_mode()
def test_dcp_refuses_global_block_size(ranks):
    problem = make_problem(random.Random(0), rows=3, row_repeat=1, with_starts=True, block_size=4)
    assert ranks.run(refuses_local_block_size_mismatch, problem) == [True] * WORLD_SIZE


def shard_of(global_logits: torch.Tensor, shard: Shard) -> torch.Tensor:
    """The global columns a shard holds, in local order; -inf for local padding."""
    out = torch.full((global_logits.shape[0], len(shard.cols)), -float("inf"))
    real = [j for j, col in enumerate(shard.cols) if col >= 0]
    out[:, real] = global_logits[:, [shard.cols[j] for j in real]].cpu()
    return out


@pytest.mark.parametrize("block_size", GLOBAL_BLOCK_SIZES)
@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_mask_with_local_block_size(block_size, row_repeat, with_starts, seed, device):
    """Masking a shard with the local block size and the global candidate ids gives
    that shard of the globally masked logits.

    Each shard keeps at least one padding column: without it, a rank holding none of
    a row's newest block sees that candidate "past the width" and keeps its last
    column (the packed-column clamp), which the global mask does not."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    problem = make_problem(
        rng,
        rows=6,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block_size,
        values="normal",
        local_pads=[rng.randint(1, 3) for _ in range(WORLD_SIZE)],
    )
    lengths = problem.lengths.tolist()
    candidates = torch.full((problem.rows, 3), -1, dtype=torch.int32)
    for row in range(problem.rows):
        blocks = -(-lengths[row // row_repeat] // block_size)
        chosen = rng.sample(range(blocks), min(blocks, 2))
        candidates[row, : len(chosen)] = torch.tensor(chosen, dtype=torch.int32)
    row_ks = problem.row_ks.to(device) if problem.row_ks is not None else None
    masked = problem.logits.to(device)
    cb.apply_candidate_mask(
        masked, row_ks, problem.row_ke.to(device), candidates.to(device), block_size, row_repeat
    )

    for shard in problem.shards:
        local = shard.logits.to(device)
        cb.apply_candidate_mask(
            local,
            shard.row_ks.to(device) if shard.row_ks is not None else None,
            shard.row_ke.to(device),
            candidates.to(device),
            block_size // WORLD_SIZE,
            row_repeat,
        )
        torch.testing.assert_close(local.cpu(), shard_of(masked, shard), rtol=0, atol=0)
