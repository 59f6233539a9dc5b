# SPDX-License-Identifier: Apache-2.0
"""The DCP path of the baked candidate blocks, over real ranks: what the diff promises.

The diff's docstrings promise, under DCP (``dcp_group`` given):

- ``logits`` hold this rank's LOCAL packed columns; an empty local shard is fine;
- ``block_size`` is the local block (global // world); with interleave 1 global state
  ``t`` lives on rank ``t % world`` at local position ``t // world``, so local block ``b``
  is this rank's share of global block ``b`` and the block ids need no translation;
- one all-reduce per row slice over ``[rows, max_global_blocks]`` within the scratch cap;
- ``apply_candidate_mask`` with the LOCAL block size applies the candidate ids unchanged.

So every rank's selection must equal the single-rank selection on the global logits with
the global block size, and every rank's masked shard must equal its share of the
single-rank mask: for any local widths (unpadded, padded, empty), any world size,
``row_repeat``, packed prefill starts, and logits holding NaN or -inf. Where scores tie,
the contract is stated in ``test_dcp_ties``. Cases that hit a defect registered in
``../known-defects.toml`` carry its id (added at run time where the case's data decides:
``mask_defect_hits`` models the defect); on bakes that have it they must fail with the
defect's signature, every other check of the case still passing first. The ranks
are real processes: gloo on the CPU (``--interpret``), NCCL with one rank per GPU
where there are as many GPUs as ranks, else gloo on one GPU.
"""

import random
from dataclasses import dataclass

import pytest
import torch
from dcp2_support import dcp_group, load_kernel

from bakery.testing import Bake, tree_from_env

cb = load_kernel()
#: Whether the bake carries the proposed NaN fix, which reduces int32 keys, not floats.
NAN_KEYS = any(d.endswith("nan-max-reduce.diff") for d in Bake.of(tree_from_env()).diffs)

WORLD_SIZES = [2, 4]
UNWRITTEN = -7
#: Logits outside every row's bounds: large, so that reading them shows.
GARBAGE = 1e6
NAN = float("nan")
INF = float("inf")
MASK_DEFECT = "dcp2-mask-past-width"
NAN_DEFECT = "dcp2-nan-max-reduce"


def on_rank(count: int, rank: int, world: int) -> int:
    """How many of a request's first ``count`` states live on ``rank``."""
    return len(range(rank, count, world))


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
    world: int
    shards: list[Shard]

    @property
    def rows(self) -> int:
        return self.logits.shape[0]


def _pick_groups(
    rng: random.Random,
    groups: int,
    request_lengths: list[int],
    near: list[int],
    group_lengths: list[int] | None,
    group_requests: list[int] | None,
) -> tuple[list[int], list[int]]:
    """Each row group's request and context length (see make_problem)."""
    picks, lengths = [], []
    for group in range(groups):
        q = rng.randrange(len(request_lengths))
        full = request_lengths[q]
        length = rng.choice([0, full, full, rng.randint(0, full), min(full, rng.choice(near))])
        if groups >= 3 and group == 1:
            length = 0  # rows without context
        if groups >= 3 and group == 2:
            length = full
        if group_lengths is not None:
            q = group_requests[group] if group_requests is not None else 0
            length = group_lengths[group]
        picks.append(q)
        lengths.append(length)
    return picks, lengths


def _values(values: str, rows: int, width: int) -> torch.Tensor:
    if values == "distinct":
        return torch.randperm(rows * width).float().view(rows, width)
    if values == "ties":
        return torch.randint(0, 3, (rows, width)).float()
    return torch.randn(rows, width)


def _pad(rng: random.Random, widths: str, to_widest: int, local_block: int) -> int:
    """Columns a rank's local logits get past its states (see make_problem's ``widths``)."""
    if widths == "unpadded":
        return 0
    if widths == "widest":
        return to_widest + rng.randint(0, local_block)
    return rng.randint(0, 2 * local_block)


def make_problem(
    rng: random.Random,
    *,
    world: int,
    rows: int,
    row_repeat: int,
    with_starts: bool,
    block_size: int,
    values: str = "distinct",
    blocks: str = "needed",
    widths: str = "random",
    request_lengths: list[int] | None = None,
    group_lengths: list[int] | None = None,
    group_requests: list[int] | None = None,
    neg_inf: float = 0.0,
) -> Problem:
    """A global problem and its interleaved shards.

    With starts, the packed columns hold 1-3 requests back to back (prefill); without,
    every row's columns start at 0 (decode). Row groups take their request's full
    context, none, or a part (or ``group_lengths`` of ``group_requests``, default
    request 0); lengths near block boundaries are favoured. ``blocks``:
    ``max_global_blocks`` is what the rows need (what callers pass), or the global
    width's block count. ``widths``: each rank's local logits are exactly its states
    (``unpadded``), as wide as the widest rank's plus up to a local block (``widest``:
    vLLM 0.30.0's wiring), or padded by 0 to 2 local blocks (``random``). ``neg_inf``:
    the share of logits that are -inf.
    """
    g = block_size
    near = [1, 2, g - 1, g, g + 1, 2 * g, 2 * g + 1, 3 * g - 1, 4 * g, rng.randint(1, 5 * g)]
    near = [n for n in near if n > 0]
    if request_lengths is None:
        count = rng.randint(1, 3) if with_starts else 1
        request_lengths = [rng.choice(near) for _ in range(count)]
    starts = [sum(request_lengths[:q]) for q in range(len(request_lengths))]
    groups = -(-rows // row_repeat)
    picks, lengths = _pick_groups(rng, groups, request_lengths, near, group_lengths, group_requests)
    packed = sum(request_lengths)
    width = packed + rng.randint(0, g)
    logits = _values(values, rows, width)
    logits[torch.rand(rows, width) < neg_inf] = -INF
    logits[:, packed:] = GARBAGE
    for row in range(rows):
        group = row // row_repeat
        lo = starts[picks[group]] if with_starts else 0
        logits[row, :lo] = GARBAGE
        logits[row, lo + lengths[group] :] = GARBAGE

    def as_int32(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32)

    local_cols = []
    for rank in range(world):
        local_starts, cols = [], []
        for start, count in zip(starts, request_lengths, strict=True):
            local_starts.append(len(cols))
            cols.extend(start + t for t in range(rank, count, world))
        local_cols.append((local_starts, cols))
    widest = max(len(cols) for _, cols in local_cols)
    shards = []
    for rank, (local_starts, cols) in enumerate(local_cols):
        cols = cols + [-1] * _pad(rng, widths, widest - len(cols), g // world)
        local = torch.full((rows, len(cols)), GARBAGE)
        real = [j for j, col in enumerate(cols) if col >= 0]
        local[:, real] = logits[:, [cols[j] for j in real]]
        ks = [local_starts[picks[group]] for group in range(groups)]
        ke = [ks[group] + on_rank(lengths[group], rank, world) for group in range(groups)]
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
        world=world,
        shards=shards,
    )


def set_global(problem: Problem, row: int, col: int, value: float) -> None:
    """Set one global logit and the local column that holds it."""
    problem.logits[row, col] = value
    for shard in problem.shards:
        if col in shard.cols:
            shard.logits[row, shard.cols.index(col)] = value


# -- single rank (the truth) and one rank's DCP call ----------------------------------------


def single_rank(problem: Problem, topk_blocks: int, device) -> torch.Tensor:
    """The single-rank selection of the global problem (the truth)."""
    ks = problem.row_ks.to(device) if problem.row_ks is not None else None
    out = torch.full((problem.rows, topk_blocks), UNWRITTEN, dtype=torch.int32, device=device)
    cb.select_candidate_blocks(
        problem.logits.to(device),
        ks,
        problem.row_ke.to(device),
        topk_blocks,
        problem.block_size,
        out,
        problem.row_repeat,
    )
    return out.cpu()


def global_mask(problem: Problem, candidates: torch.Tensor, device) -> torch.Tensor:
    """The global logits masked with ``candidates`` by the single-rank path. Each launch
    through Triton's interpreter costs tenths of a second, so a test computes each
    selection and each mask once and hands them on."""
    ks = problem.row_ks.to(device) if problem.row_ks is not None else None
    masked = problem.logits.to(device, copy=True)  # .to() alone aliases CPU tensors
    cb.apply_candidate_mask(
        masked,
        ks,
        problem.row_ke.to(device),
        candidates.to(device),
        problem.block_size,
        problem.row_repeat,
    )
    return masked.cpu()


def dcp_on_rank(ctx, problem: Problem, topk_blocks: int, reduce_bytes: int | None):
    """Rank task: the DCP selection on this rank's shard, its shard masked with the
    local block size and that selection, and the all-reduces the selection made."""
    import torch.distributed as dist

    shard = problem.shards[ctx.rank]
    dev = ctx.device
    ks = shard.row_ks.to(dev) if shard.row_ks is not None else None
    ke = shard.row_ke.to(dev)
    calls, reduced, topk_dtypes = [], [], []
    all_reduce = dist.all_reduce
    topk = torch.Tensor.topk

    def spy(tensor, *args, **kwargs):
        group = kwargs["group"] if "group" in kwargs else (args[1:2] or [None])[0]
        calls.append((tuple(tensor.shape), tensor.dtype, group is ctx.group))
        done = all_reduce(tensor, *args, **kwargs)
        reduced.append(tensor.clone().cpu())
        return done

    def topk_spy(self, *args, **kwargs):
        topk_dtypes.append(self.dtype)
        return topk(self, *args, **kwargs)

    cap = cb._DCP_REDUCE_BYTES
    dist.all_reduce = spy
    torch.Tensor.topk = topk_spy
    if reduce_bytes is not None:
        cb._DCP_REDUCE_BYTES = reduce_bytes
    try:
        out = torch.full((problem.rows, topk_blocks), UNWRITTEN, dtype=torch.int32, device=dev)
        cb.select_candidate_blocks(
            shard.logits.to(dev),
            ks,
            ke,
            topk_blocks,
            problem.block_size // ctx.world_size,
            out,
            problem.row_repeat,
            dcp_group=dcp_group(ctx),
            global_row_ke=problem.lengths.to(dev),
            global_block_size=problem.block_size,
            max_global_blocks=problem.max_global_blocks,
        )
    finally:
        dist.all_reduce = all_reduce
        torch.Tensor.topk = topk
        cb._DCP_REDUCE_BYTES = cap
    masked = shard.logits.to(dev, copy=True)
    local_block = problem.block_size // ctx.world_size
    cb.apply_candidate_mask(masked, ks, ke, out, local_block, problem.row_repeat)
    return out.cpu(), (calls, topk_dtypes), masked.cpu(), reduced


def bakery_rank_warmup(ctx) -> None:
    """Run by bakery on a GPU, on every rank once before its first test (README,
    ``rank_pool``): one small case of the first test's kind, so that what a process's
    first launch pays (Triton's launchers, the first collective) is paid while the
    single-rank tests run. It checks nothing: the tests do."""
    rng = random.Random("warm-up")
    problem = make_problem(
        rng, world=ctx.world_size, rows=2, row_repeat=1, with_starts=False, block_size=8
    )
    with torch.inference_mode():
        dcp_on_rank(ctx, problem, 1, None)


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
            dcp_group=dcp_group(ctx),
            global_row_ke=problem.lengths.to(ctx.device),
            global_block_size=problem.block_size,
            max_global_blocks=problem.max_global_blocks,
        )
    return True


def shard_of(global_logits: torch.Tensor, shard: Shard) -> torch.Tensor:
    """The global columns a shard holds, in local order; -inf for local padding."""
    out = torch.full((global_logits.shape[0], len(shard.cols)), -INF)
    real = [j for j, col in enumerate(shard.cols) if col >= 0]
    out[:, real] = global_logits[:, [shard.cols[j] for j in real]].cpu()
    return out


def slice_cap(slice_rows: int | None, problem: Problem) -> int | None:
    """A scratch cap that yields ``slice_rows`` rows per slice, as large as allowed."""
    if slice_rows is None:
        return None
    row_bytes = max(problem.max_global_blocks, 1) * 4
    return slice_rows * row_bytes + row_bytes - 1


# -- checks ---------------------------------------------------------------------------------


def check_collectives(problem: Problem, reduce_bytes: int | None, results) -> None:
    """One ``[slice, max_global_blocks]`` all-reduce per slice over the DCP group, the
    same on every rank, in exactly the scores' dtype (the logits' here: no
    ``score_dtype``), or on int32 keys where the NaN fix is baked
    (fixes/91-nan-max-reduce.diff); the top-k after it gets the scores' dtype."""
    nblocks = max(problem.max_global_blocks, 1)
    cap = cb._DCP_REDUCE_BYTES if reduce_bytes is None else reduce_bytes
    per_slice = max(1, cap // (nblocks * 4))
    want = torch.int32 if NAN_KEYS else problem.logits.dtype
    for rank, (_, (calls, topk_dtypes), _, _) in enumerate(results):
        assert all(ours for _, _, ours in calls), f"rank {rank}: all-reduce outside the group"
        assert [shape[1:] for shape, _, _ in calls] == [(nblocks,)] * len(calls)
        assert sum(shape[0] for shape, _, _ in calls) == problem.rows
        assert len(calls) == -(-problem.rows // per_slice), f"rank {rank}: {calls}"
        assert all(dtype == want for _, dtype, _ in calls), f"rank {rank}: {calls}, want {want}"
        assert all(s[0] * s[1] * 4 <= max(cap, nblocks * 4) for s, _, _ in calls)
        assert topk_dtypes == [problem.logits.dtype] * len(calls), f"rank {rank}: {topk_dtypes}"
        assert calls == results[0][1][0], "ranks made different collectives"


def run_dcp(ranks, problem: Problem, topk_blocks: int, reduce_bytes=None):
    return ranks.run(dcp_on_rank, problem, topk_blocks, reduce_bytes)


def assert_dcp_equals_single_rank(
    ranks, problem, topk_blocks, device, reduce_bytes=None, request=None, nan_selected=True
):
    """Every rank: the single-rank selection, and its share of the single-rank mask.
    With ``request``, a case that reaches the past-width defect is marked with it;
    ``nan_selected``: the release's NaN rule (expectations.toml), for the defect's model."""
    task = ranks.submit(dcp_on_rank, [(problem, topk_blocks, reduce_bytes)] * problem.world)
    expected = single_rank(problem, topk_blocks, device)
    masked = global_mask(problem, expected, device)
    if request is not None and mask_defect_hits(problem, expected, masked):
        request.applymarker(pytest.mark.known_defect(MASK_DEFECT))
    results = ranks.gather(task)
    check_collectives(problem, reduce_bytes, results)
    # Each rank's mask against the global mask with that rank's own selection first:
    # it must hold even where a selection is wrong.
    per_rank = []
    for out, _, local, _ in results:
        same_choice = torch.equal(out, expected)
        own = masked if same_choice else global_mask(problem, out, device)
        per_rank.append((local, out, own))
    check_masks(problem, per_rank)
    for rank, (out, _, _, reduced) in enumerate(results):
        check_selection(problem, rank, out, expected, reduced, topk_blocks, nan_selected)


def check_selection(problem, rank, out, expected, reduced, topk_blocks, nan_selected=True) -> None:
    """The rank's selection is the single-rank one. Where it is not, the message says
    whether the NaN defect explains it exactly: the reduced scores differ from the
    global block maxima only at NaN blocks, each reduced to a finite maximum of the
    other ranks' states, and the selection is the top-k of those reduced scores."""
    if torch.equal(out, expected):
        return
    lost = nan_lost_in_reduce(problem, torch.cat(reduced) if reduced else None)
    if lost is not None and torch.equal(
        out, topk_of_reduced(problem, lost[0], topk_blocks, nan_selected)
    ):
        raise AssertionError(
            f"NaN block score lost in the DCP reduce: rank {rank} {lost[1]}; "
            f"selects {out.tolist()}, the single rank {expected.tolist()}"
        )
    torch.testing.assert_close(out, expected, rtol=0, atol=0, msg=f"rank {rank} selection")


def reduced_as_float(reduced: torch.Tensor) -> torch.Tensor:
    if reduced.dtype != torch.int32:
        return reduced.float()
    keys = reduced  # the NaN fix's int32 keys: signed order is the float order
    return (keys ^ ((keys >> 31) & 0x7FFFFFFF)).view(torch.float32)


def nan_lost_in_reduce(problem: Problem, reduced: torch.Tensor | None):
    """The reduced scores and where a NaN block lost its NaN, when that is the only
    way they differ from the global block maxima; else None."""
    if reduced is None:
        return None
    got = reduced_as_float(reduced)
    g, nblocks = problem.block_size, got.shape[1]
    where = []
    for row in range(problem.rows):
        group = row // problem.row_repeat
        lo = int(problem.row_ks[group]) if problem.row_ks is not None else 0
        hi = int(problem.row_ke[group])
        for b in range(nblocks):
            cols = list(range(lo + b * g, min(lo + (b + 1) * g, hi)))
            seg = problem.logits[row, cols]
            want = float(seg.max()) if cols else -INF
            value = float(got[row, b])
            if value == want or (value != value and want != want):
                continue
            finite = seg[~seg.isnan()]
            if want == want or value != value or not finite.numel():
                return None  # not a NaN block, or not reduced to a finite maximum
            if value not in finite.tolist():
                return None
            where.append(f"row {row} block {b} reduced to {value}")
    return (got, ", ".join(where)) if where else None


def topk_of_reduced(
    problem: Problem, scores: torch.Tensor, topk_blocks: int, nan_selected: bool = True
) -> torch.Tensor:
    """What the DCP path selects from these reduced scores: the newest global block
    pinned, rows without context -inf, torch.topk (NaN ranks highest), -1 for -inf, past
    the count, and for a NaN block where the release drops them (0.30.0's rule: the NaN
    block keeps its place and is written -1)."""
    scores = scores.clone()
    nblocks = scores.shape[1]
    ends = problem.lengths[:-1].repeat_interleave(problem.row_repeat)[: problem.rows].long()
    pin = ((ends - 1) // problem.block_size).clamp(0, nblocks - 1).view(-1, 1)
    scores.scatter_(1, pin, INF)
    scores.masked_fill_((ends <= 0).view(-1, 1), -INF)
    top = scores.topk(min(topk_blocks, nblocks), dim=-1)
    out = torch.full((problem.rows, topk_blocks), -1, dtype=torch.int32)
    keep = top.values != -INF
    if not nan_selected:
        keep &= ~top.values.isnan()
    out[:, : top.indices.shape[1]] = torch.where(keep, top.indices, -1).int()
    return out


def upstream_mask(shard: Shard, problem: Problem, candidates: torch.Tensor) -> torch.Tensor:
    """The defect, modelled: upstream's mask of one shard with the LOCAL block size,
    its past-the-width clamp included (a candidate block that starts at or past the
    width keeps the shard's last column, if that column is in the row's bounds)."""
    width = shard.logits.shape[1]
    local_block = problem.block_size // problem.world
    out = torch.full_like(shard.logits, -INF)
    for row in range(problem.rows):
        group = row // problem.row_repeat
        start = int(shard.row_ks[group]) if shard.row_ks is not None else 0
        end = int(shard.row_ke[group])
        chosen = [b for b in candidates[row].tolist() if b >= 0]
        clamp = any(start + b * local_block >= width for b in chosen)
        for col in range(start, min(end, width)):
            if (col - start) // local_block in chosen or (clamp and col == width - 1):
                out[row, col] = shard.logits[row, col]
    return out


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values, NaN equal to NaN."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def mask_defect_hits(problem: Problem, candidates: torch.Tensor, masked: torch.Tensor) -> bool:
    """Whether the past-width defect changes some shard's mask with these candidates
    (``masked``: the global logits masked with them, :func:`global_mask`)."""
    return any(
        not same(upstream_mask(shard, problem, candidates), shard_of(masked, shard))
        for shard in problem.shards
    )


def check_masks(problem: Problem, per_rank) -> None:
    """Each rank's masked shard equals its share of the global logits masked with the
    same candidates (``per_rank``: (shard masked, candidates, global masked)). Where it
    does not, the message says whether the past-width defect explains every difference
    (``upstream_mask``)."""
    wrong, defect = [], []
    for rank, (local, candidates, masked) in enumerate(per_rank):
        shard = problem.shards[rank]
        want = shard_of(masked, shard)
        rows = (~((local == want) | (local.isnan() & want.isnan()))).any(dim=1)
        if not rows.any():
            continue
        where = f"rank {rank} rows {rows.nonzero().flatten().tolist()}"
        modelled = same(local, upstream_mask(shard, problem, candidates))
        (defect if modelled else wrong).append(where)
    assert not wrong, f"shards differ from the global mask: {'; '.join(wrong)}"
    assert not defect, f"mask keeps a past-the-width state: {'; '.join(defect)}"


@pytest.fixture(params=WORLD_SIZES, ids=lambda w: f"world{w}")
def ranks(request, rank_pool):
    """Real ranks, world 2 and 4 (tests narrow it with ``parametrize("ranks", ...,
    indirect=True)`` where world 4, 4 processes on few cores, would add no case)."""
    return rank_pool(request.param)


# -- the tests ------------------------------------------------------------------------------

#: (block, row_repeat, with_starts, slice_rows, widths, blocks, neg_inf): each option met
#: in several combinations, not all of them (each case costs seconds under the interpreter);
#: every local-width layout (``make_problem``'s ``widths``) in both modes.
EQUIVALENCE_CASES = [
    (8, 1, False, None, "widest", "needed", 0.0),
    (8, 3, True, 1, "random", "width", 0.4),
    (16, 1, True, 2, "unpadded", "needed", 0.0),
    (4, 3, False, 2, "unpadded", "needed", 0.4),
    (8, 1, True, None, "widest", "width", 0.0),
    (16, 3, True, None, "random", "needed", 0.4),
]


@pytest.mark.parametrize(
    "ranks, seed",
    [(2, 0), (2, 1), (4, 0)],
    indirect=["ranks"],
    ids=["world2-0", "world2-1", "world4-0"],
)
@pytest.mark.parametrize("case", EQUIVALENCE_CASES, ids=lambda c: "-".join(map(str, c)))
@torch.inference_mode()
def test_dcp_equals_single_rank(case, seed, ranks, device, request):
    """Seeded random problems, shards unpadded, randomly padded or as wide as the widest
    rank (how vLLM 0.30.0 wires DCP), empty where a request has fewer states than
    ranks: selection and mask, end to end, equal the single-rank ones."""
    block, row_repeat, with_starts, slice_rows, widths, blocks, neg_inf = case
    world = ranks.world_size
    rng = random.Random(f"{case}-{seed}-{world}")
    torch.manual_seed(seed)
    problem = make_problem(
        rng,
        world=world,
        rows=rng.randint(2, 9),
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block,
        blocks=blocks,
        widths=widths,
        neg_inf=neg_inf,
    )
    nblocks = max(problem.max_global_blocks, 1)
    topk_blocks = rng.choice([1, 2, 3, nblocks, nblocks + 3])
    assert_dcp_equals_single_rank(
        ranks, problem, topk_blocks, device, slice_cap(slice_rows, problem), request
    )


@pytest.mark.parametrize("with_starts", [False, True])
@torch.inference_mode()
def test_dcp_unpadded_local_shards(with_starts, ranks, device, request):
    """Each rank's logits are exactly its states (the docstring's "local packed
    columns"). The last request has N = 2 G + 1 states: its rows select the newest
    block 2 (pinned, one state, on rank 0) and block 0 (the largest logit), so every
    other rank holds no state of a selected block 2 and must keep none of block 1."""
    world = ranks.world_size
    rng = random.Random(world)
    torch.manual_seed(world)
    block = 4 * world
    lengths = [block + 1, 2 * block + 1] if with_starts else [2 * block + 1]
    last = len(lengths) - 1
    problem = make_problem(
        rng,
        world=world,
        rows=6,
        row_repeat=2,
        with_starts=with_starts,
        block_size=block,
        values="normal",
        widths="unpadded",
        request_lengths=lengths,
        group_lengths=[2 * block + 1, lengths[0], 2 * block + 1],
        group_requests=[last, 0, last],
    )
    for row in range(problem.rows):
        group = row // problem.row_repeat
        lo = int(problem.row_ks[group]) if problem.row_ks is not None else 0
        set_global(problem, row, lo, 1e5)  # block 0 wins the top-1
    assert_dcp_equals_single_rank(ranks, problem, 2, device, request=request)


@pytest.mark.known_defect(MASK_DEFECT)
@torch.inference_mode()
def test_mask_smallest_past_width_case(device):
    """Issue 15's smallest case: 5 states, global block 4, world 2, block 1 selected
    (the pinned newest; top-1 picks it too). Rank 1 holds states 1 and 3 (width 2),
    none of block 1: its masked shard must be all -inf, as the global mask says."""
    logits = torch.arange(1.0, 6.0).view(1, 5)
    candidates = torch.tensor([[1]], dtype=torch.int32)
    masked = logits.to(device, copy=True)  # .to() alone aliases CPU tensors
    cb.apply_candidate_mask(
        masked, None, torch.tensor([5], dtype=torch.int32).to(device), candidates.to(device), 4
    )
    assert masked.cpu().tolist() == [[-INF, -INF, -INF, -INF, 5.0]]
    for rank, cols in enumerate([[0, 2, 4], [1, 3]]):
        local = logits[:, cols].to(device, copy=True)
        ends = torch.tensor([len(cols)], dtype=torch.int32, device=device)
        cb.apply_candidate_mask(local, None, ends, candidates.to(device), 2)
        want = [5.0 if c == 4 else -INF for c in cols]
        got = local.cpu().tolist()
        if rank == 1 and got == [[-INF, 4.0]]:  # the defect: its last local state kept
            raise AssertionError(f"mask keeps a past-the-width state: rank 1 kept {got}")
        assert got == [want], f"rank {rank} kept {got}"


#: (world, global block, request lengths, widths); each selects every single block.
MASK_CASES = [
    (2, 2, [3, 7], "unpadded"),
    (2, 4, [5, 9, 13], "unpadded"),
    (2, 8, [17, 25], "unpadded"),
    (4, 4, [5, 6, 7, 9], "unpadded"),
    (4, 8, [9, 17, 11], "unpadded"),
    (2, 4, [5, 9, 13], "widest"),
    (4, 8, [9, 17, 11], "widest"),
    (2, 2, [1, 1, 1], "unpadded"),  # empty shard on rank 1
    (4, 4, [1, 2, 1], "unpadded"),  # empty shards on ranks 2 and 3
]


@pytest.mark.parametrize(
    "case", MASK_CASES, ids=lambda c: f"w{c[0]}-g{c[1]}-{c[3]}-{'_'.join(map(str, c[2]))}"
)
@pytest.mark.parametrize("row_repeat", [1, 2])
@torch.inference_mode()
def test_mask_with_local_block_size(case, row_repeat, device, request):
    """Masking each shard with the LOCAL block size and the global candidate ids gives
    that shard of the globally masked logits: every single block selected in turn (one
    row each), packed requests back to back, shards unpadded, empty, or as wide as the
    widest. Cases where upstream's clamp keeps a state the global mask drops
    (``mask_defect_hits``: N = k * G + 1 states, unpadded) hit the registered defect:
    there every other row must still match, and the wrong rows be the defect's."""
    world, block, lengths, widths = case
    rng = random.Random(block)
    torch.manual_seed(block)
    blocks = [(q, b) for q, n in enumerate(lengths) for b in range(-(-n // block))]
    rows = len(blocks) * row_repeat
    groups = [q for q, _ in blocks]
    problem = make_problem(
        rng,
        world=world,
        rows=rows,
        row_repeat=row_repeat,
        with_starts=True,
        block_size=block,
        values="normal",
        widths=widths,
        request_lengths=lengths,
        group_lengths=[lengths[q] for q in groups],
        group_requests=groups,
    )
    candidates = torch.tensor(
        [[b, -1] for _, b in blocks for _ in range(row_repeat)], dtype=torch.int32
    )
    masked = global_mask(problem, candidates, device)
    if mask_defect_hits(problem, candidates, masked):
        request.applymarker(pytest.mark.known_defect(MASK_DEFECT))

    per_rank = []
    for shard in problem.shards:
        local = shard.logits.to(device, copy=True)
        cb.apply_candidate_mask(
            local,
            shard.row_ks.to(device),
            shard.row_ke.to(device),
            candidates.to(device),
            block // world,
            row_repeat,
        )
        per_rank.append((local.cpu(), candidates, masked))
    check_masks(problem, per_rank)


@pytest.mark.known_defect(NAN_DEFECT)
@pytest.mark.parametrize(
    "ranks, row_repeat, with_starts",
    [(2, 1, False), (2, 2, True), (4, 1, True), (4, 2, False)],
    indirect=["ranks"],
)
@torch.inference_mode()
def test_dcp_nan_logits(row_repeat, with_starts, ranks, device, expected):
    """NaN is part of the contract: NaN anywhere in a block makes the block's score NaN
    (single rank), and each release says what a NaN block is (0.30.0: dropped, written
    -1; 0.31.0+: selected, "NaN scores can occur during warmup"). DCP must give every
    rank the single-rank answer, whichever rank holds the NaN state: here each rank
    holds one, in an older block of its own row."""
    world = ranks.world_size
    rng = random.Random(world * 10 + row_repeat)
    torch.manual_seed(row_repeat)
    block = 2 * world
    groups = 2 * world
    problem = make_problem(
        rng,
        world=world,
        rows=groups * row_repeat,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block,
        widths="widest",
        request_lengths=[5 * block + 1],
        group_lengths=[5 * block + 1] * groups,
    )
    for group in range(groups):
        rank = group % world
        state = (group % 4) * block + rank  # on ``rank``, in block group % 4 (not the newest)
        for row in range(group * row_repeat, min((group + 1) * row_repeat, problem.rows)):
            lo = int(problem.row_ks[group]) if problem.row_ks is not None else 0
            set_global(problem, row, lo + state, NAN)
    nan_selected = expected is None or expected.data["nan_rule"] == "select"
    assert_dcp_equals_single_rank(ranks, problem, 4, device, nan_selected=nan_selected)


@pytest.mark.parametrize(
    "ranks, block, row_repeat, with_starts",
    [(2, 4, 1, False), (2, 4, 3, True), (2, 8, 1, True), (2, 8, 3, False), (4, 8, 1, False)],
    indirect=["ranks"],
)
@pytest.mark.parametrize("widths", ["widest", "random", "unpadded"])
@torch.inference_mode()
def test_dcp_ties(block, row_repeat, with_starts, widths, ranks, device, request):
    """Tied block scores, with the block count callers pass (what the rows need).

    The contract under ties: torch.topk's order among equal scores depends on the
    score row's length, which differs between the DCP scores (``max_global_blocks``)
    and one rank's (the width's block count). So every rank selects the same ids, and
    they are distinct, -1 only after them, and their block scores equal the
    single-rank selection's as a multiset; the masks equal the global mask with the
    DCP selection."""
    world = ranks.world_size
    rng = random.Random(block + row_repeat)
    torch.manual_seed(block)
    problem = make_problem(
        rng,
        world=world,
        rows=7,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=block,
        values="ties",
        widths=widths,
    )
    topk_blocks = 3
    task = ranks.submit(dcp_on_rank, [(problem, topk_blocks, slice_cap(2, problem))] * world)
    expected = single_rank(problem, topk_blocks, device)
    results = ranks.gather(task)
    check_collectives(problem, slice_cap(2, problem), results)
    scores = block_scores(problem)
    masked = global_mask(problem, results[0][0], device)
    if mask_defect_hits(problem, results[0][0], masked):
        request.applymarker(pytest.mark.known_defect(MASK_DEFECT))
    for rank, (out, _, _, _) in enumerate(results):
        assert torch.equal(out, results[0][0]), f"rank {rank} selected other blocks"
        for row in range(problem.rows):
            ids = [b for b in out[row].tolist() if b >= 0]
            want = [b for b in expected[row].tolist() if b >= 0]
            assert out[row].tolist() == ids + [-1] * (topk_blocks - len(ids)), out[row]
            assert len(set(ids)) == len(ids)
            got = sorted(scores[row][b] for b in ids)
            assert got == sorted(scores[row][b] for b in want), f"rank {rank} row {row}"
    check_masks(problem, [(local, out, masked) for out, _, local, _ in results])


def block_scores(problem: Problem) -> list[list[float]]:
    """Each row's global block scores from the contract: the max over the block's
    states within the row's bounds, -inf when it has none; the newest block +inf."""
    g = problem.block_size
    out = []
    for row in range(problem.rows):
        group = row // problem.row_repeat
        lo = int(problem.row_ks[group]) if problem.row_ks is not None else 0
        hi = int(problem.row_ke[group])
        nblocks = max(-(-problem.logits.shape[1] // g), problem.max_global_blocks, 1)
        row_scores = []
        for b in range(nblocks):
            seg = problem.logits[row, lo + b * g : min(lo + (b + 1) * g, hi)]
            row_scores.append(float(seg.max()) if len(seg) else -INF)
        if hi > lo:
            row_scores[(hi - lo - 1) // g] = INF
        out.append(row_scores)
    return out


@pytest.mark.parametrize(
    "ranks, row_repeat, with_starts",
    [(2, 1, True), (2, 3, False), (4, 3, True)],
    indirect=["ranks"],
)
@torch.inference_mode()
def test_dcp_one_column_local_shard(row_repeat, with_starts, ranks, device):
    """Rank 1 holds a single column, and every finite logit: the other ranks' are -inf."""
    world = ranks.world_size
    rng = random.Random(1)
    torch.manual_seed(0)
    problem = make_problem(
        rng,
        world=world,
        rows=3 * row_repeat,
        row_repeat=row_repeat,
        with_starts=with_starts,
        block_size=2 * world,
        widths="unpadded",
        request_lengths=[1, 2] if with_starts else [2],
        group_lengths=[2, 0, 2],
        group_requests=[1, 1, 1] if with_starts else [0, 0, 0],
    )
    assert problem.shards[1].logits.shape[1] == 1
    assert all(s.logits.shape[1] == 0 for s in problem.shards[2:])
    for shard in (problem.shards[0], *problem.shards[2:]):
        for col in shard.cols:
            problem.logits[:, col] = -INF
        shard.logits.fill_(-INF)
    assert_dcp_equals_single_rank(ranks, problem, 2, device, slice_cap(1, problem))


@pytest.mark.parametrize("ranks, row_repeat", [(2, 1), (4, 3)], indirect=["ranks"])
@torch.inference_mode()
def test_dcp_empty_local_shards(row_repeat, ranks, device):
    """Requests of one state each: every rank but rank 0 holds no column (width 0)."""
    world = ranks.world_size
    rng = random.Random(world)
    torch.manual_seed(0)
    problem = make_problem(
        rng,
        world=world,
        rows=5,
        row_repeat=row_repeat,
        with_starts=True,
        block_size=2 * world,
        widths="unpadded",
        request_lengths=[1, 1, 1],
    )
    assert all(s.logits.shape[1] == 0 for s in problem.shards[1:])
    assert_dcp_equals_single_rank(ranks, problem, 2, device, slice_cap(1, problem))


@torch.inference_mode()
def test_dcp_no_context_anywhere(ranks, device):
    """Zero-width logits on every rank and no context: max_global_blocks is 0."""
    problem = make_problem(
        random.Random(0),
        world=ranks.world_size,
        rows=4,
        row_repeat=2,
        with_starts=False,
        block_size=4,
        widths="unpadded",
        request_lengths=[0],
    )
    assert problem.max_global_blocks == 0
    problem.logits = problem.logits[:, :0]
    assert_dcp_equals_single_rank(ranks, problem, 3, device)


@torch.inference_mode()
def test_dcp_zero_rows(ranks):
    """No rows: nothing to reduce, so no collective (every rank returns at once)."""
    problem = make_problem(
        random.Random(0),
        world=ranks.world_size,
        rows=1,
        row_repeat=1,
        with_starts=True,
        block_size=4,
    )
    problem.logits = problem.logits[:0]
    for shard in problem.shards:
        shard.logits = shard.logits[:0]
    for out, (calls, topk_dtypes), _, _ in run_dcp(ranks, problem, 3):
        assert out.shape == (0, 3) and calls == [] and topk_dtypes == []


@torch.inference_mode()
def test_dcp_refuses_global_block_size(ranks):
    problem = make_problem(
        random.Random(0),
        world=ranks.world_size,
        rows=3,
        row_repeat=1,
        with_starts=True,
        block_size=4,
    )
    assert ranks.run(refuses_local_block_size_mismatch, problem) == [True] * ranks.world_size
