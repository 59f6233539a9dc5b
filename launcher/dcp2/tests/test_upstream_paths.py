# SPDX-License-Identifier: Apache-2.0
"""Upstream code paths that the per-release dcp2 ports touch, alone and under DCP.

- 0.31.0: a ROCm fused top-k after the block scores (``_rocm_select_topk``).
- 0.33.0: the block-score kernel writes each row's valid block count and scores
  the -inf tail only with ``FULL_WIDTH``; a DeepSelect top-k stops at the valid
  counts and needs aligned score rows.
- 0.34.0: ``score_dtype`` for the block scores.

Which of them the tree must have comes from the release the bake's manifest records
(``../expectations.toml``; see ``conftest.py``): a port that drops upstream behaviour
fails, naming the feature, rather than skipping. DeepSelect and ROCm cannot run here;
tests stand them in on the loaded module to see which path a call takes and what it
hands over. Under DCP neither may be taken: they see one rank's scores or bounds, so
the ports always use torch.topk after the all-reduce.
"""

import inspect
import random

import pytest
import torch
from dcp2_support import dcp_group, load_kernel

from bakery.testing import Bake, tree_from_env

#: Whether the bake carries the proposed NaN fix, which reduces int32 keys, not floats.
NAN_KEYS = any(d.endswith("nan-max-reduce.diff") for d in Bake.of(tree_from_env()).diffs)

cb = load_kernel()

WORLD_SIZE = 2
INF = float("inf")
NAN = float("nan")
UNWRITTEN = -7
#: Logits outside every row's bounds: large, so that reading them shows (fits fp16).
GARBAGE = 1e4
#: Row and output alignment (bytes) the DeepSelect stand-in asks for.
IN_ALIGN, OUT_ALIGN = 64, 16


def _params(fn) -> set[str]:
    return set(inspect.signature(fn).parameters)


def _kernel_args(kernel) -> set[str]:
    names = getattr(kernel, "arg_names", None)
    return set(names) if names is not None else _params(kernel.fn)


_SELECT = getattr(cb, "_select_candidate_blocks_impl", cb.select_candidate_blocks)
HAS_SCORE_DTYPE = "score_dtype" in _params(_SELECT)
HAS_VALID_BLOCKS = {"valid_blocks", "FULL_WIDTH"} <= _kernel_args(cb._block_scores_kernel)
HAS_DEEP_SELECT = all(
    hasattr(cb, name)
    for name in (
        "has_deep_select",
        "deep_select_topk",
        "is_deep_select_supported",
        "get_deep_select_stride_requirement",
    )
)
HAS_ROCM_TOPK = hasattr(cb, "_rocm_select_topk") and hasattr(cb, "current_platform")

#: What the tree has, probed from the loaded file (signatures, kernel arguments, names);
#: what it must have comes from its release (conftest.py).
FEATURES = {
    "valid_blocks": HAS_VALID_BLOCKS,
    "deep_select": HAS_DEEP_SELECT and HAS_VALID_BLOCKS,
    "score_dtype": HAS_SCORE_DTYPE,
    "rocm_topk": HAS_ROCM_TOPK,
}


# -- references -----------------------------------------------------------------------


def ref_block_scores(
    logits: torch.Tensor,
    row_ks: torch.Tensor | None,
    row_ke: torch.Tensor,
    block_size: int,
    row_repeat: int = 1,
    *,
    dtype: torch.dtype | None = None,
    pin_nan: bool = False,
) -> torch.Tensor:
    """Block maxima from each row's start in fp32 (NaN wins, empty is -inf), the newest
    block pinned to +inf, then cast to ``dtype``. ``pin_nan``: NaN blocks become +inf
    too (what 0.33.0's kernel does when DeepSelect takes the scores)."""
    rows, width = logits.shape
    nblocks = -(-width // block_size)
    x = logits.float().cpu()
    scores = torch.full((rows, nblocks), -INF)
    for row in range(rows):
        group = row // row_repeat
        start = int(row_ks[group]) if row_ks is not None else 0
        end = int(row_ke[group])
        for block in range(nblocks):
            lo = start + block * block_size
            hi = min(lo + block_size, end, width)
            if lo < hi:
                seg = x[row, lo:hi]
                nan = bool(seg.isnan().any())
                scores[row, block] = INF if nan and pin_nan else (NAN if nan else seg.max())
        newest = (end - start - 1) // block_size
        if end > start and newest < nblocks:
            scores[row, newest] = INF
    return scores.to(dtype or logits.dtype)


def valid_counts(row_ks, row_ke, rows, width, block_size, row_repeat=1) -> list[int]:
    counts = []
    for row in range(rows):
        group = row // row_repeat
        start = int(row_ks[group]) if row_ks is not None else 0
        end = min(int(row_ke[group]), width)
        counts.append(-(-max(end - start, 0) // block_size))
    return counts


def assert_selects_top(out: torch.Tensor, scores: torch.Tensor, topk_blocks: int) -> None:
    """``out`` holds, per row, distinct blocks whose scores are the row's top
    ``topk_blocks`` (ties may pick either block), then exactly -1 (padding: -inf blocks
    and past the count; never another negative, never an unwritten entry)."""
    scores = scores.float().cpu()
    out = out.cpu()
    assert out.shape[1] == topk_blocks
    for row in range(out.shape[0]):
        ids = [i for i in out[row].tolist() if i >= 0]
        want = ids + [-1] * (topk_blocks - len(ids))
        assert out[row].tolist() == want, f"row {row}: ids then -1 padding, got {out[row]}"
        assert len(set(ids)) == len(ids) and all(i < scores.shape[1] for i in ids), out[row]
        best = scores[row].sort(descending=True).values[:topk_blocks]
        best = best[best > -INF].tolist()
        got = sorted(scores[row, ids].tolist(), reverse=True)
        assert got == best, f"row {row}: chose scores {got}, the top ones are {best}"


def bounds(rng: random.Random, groups: int, width: int, with_starts: bool, device):
    """Per-group bounds: no context, full, partial and past the logits width."""
    starts, ends = [], []
    for group in range(groups):
        start = rng.randint(0, width // 3) if with_starts else 0
        end = [start, width, rng.randint(start, width), width + rng.randint(1, 9)][group % 4]
        starts.append(start)
        ends.append(end)
    ks = torch.tensor(starts, dtype=torch.int32, device=device) if with_starts else None
    return ks, torch.tensor(ends, dtype=torch.int32, device=device)


def select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat=1, out=None, **kw):
    if out is None:
        out = torch.full(
            (logits.shape[0], topk_blocks), UNWRITTEN, dtype=torch.int32, device=logits.device
        )
    cb.select_candidate_blocks(
        logits, row_ks, row_ke, topk_blocks, block_size, out, row_repeat, **kw
    )
    return out


# -- stand-ins for the paths that cannot run here ---------------------------------------


class FakeDeepSelect:
    """Records what ``deep_select_topk`` is handed; answers like it (top-k of each row's
    first ``end`` scores, -1 padded, any order)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, input, topk, end=None, output_idx=None, indices_dtype=torch.int32):
        assert input.dim() == 2 and input.stride(1) == 1
        assert input.stride(0) * input.element_size() % IN_ALIGN == 0
        self.calls.append(
            {"scores": input.clone(), "stride": input.stride(), "end": end.clone(), "topk": topk}
        )
        if output_idx is None:
            output_idx = torch.empty(
                (input.shape[0], topk), dtype=indices_dtype, device=input.device
            )
        output_idx.fill_(-1)
        for row in range(input.shape[0]):
            n = int(end[row])
            k = min(topk, n)
            if k:
                output_idx[row, :k] = input[row, :n].float().topk(k).indices.to(output_idx.dtype)
        return output_idx


def deep_select_supported(input: torch.Tensor, topk: int) -> bool:
    """The real ``is_deep_select_supported``, with the stand-in's alignment."""
    return (
        topk <= 4096
        and input.shape[1] < 2**23
        and input.dtype in (torch.float32, torch.bfloat16)
        and input.stride(1) == 1
        and input.stride(0) * input.element_size() % IN_ALIGN == 0
    )


def refuse(*args, **kwargs):
    raise AssertionError("this top-k path must not be taken here")


class RocmPlatform:
    def is_rocm(self) -> bool:
        return True


def deep_select_patches(fake) -> dict:
    return {
        "has_deep_select": lambda: True,
        "get_deep_select_stride_requirement": lambda: (IN_ALIGN, OUT_ALIGN),
        "is_deep_select_supported": deep_select_supported,
        "deep_select_topk": fake,
    }


# -- single rank: valid_blocks, FULL_WIDTH, DeepSelect, score_dtype, ROCm ----------------


@pytest.mark.parametrize("with_starts", [False, True])
@pytest.mark.parametrize("row_repeat", [1, 2])
@torch.inference_mode()
def test_full_width_tail_never_selected(with_starts, row_repeat, device):
    """Logits as wide as the static workspace, garbage past every row's end: the torch
    top-k path (0.33.0+: ``FULL_WIDTH``) scores the tail -inf, so it is never chosen."""
    rng = random.Random(row_repeat)
    torch.manual_seed(0)
    rows, width, block_size, topk_blocks = 8, 96, 4, 6
    row_ks, row_ke = bounds(rng, -(-rows // row_repeat), width // 2, with_starts, device)
    logits = torch.full((rows, width), GARBAGE, device=device)
    for row in range(rows):
        lo = int(row_ks[row // row_repeat]) if row_ks is not None else 0
        hi = int(row_ke[row // row_repeat])
        logits[row, lo:hi] = torch.randn(max(0, min(hi, width) - lo), device=device)

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat)

    scores = ref_block_scores(logits, row_ks, row_ke, block_size, row_repeat)
    assert_selects_top(out, scores, topk_blocks)
    valid = valid_counts(row_ks, row_ke, rows, width, block_size, row_repeat)
    for row in range(rows):
        chosen = [b for b in out[row].tolist() if b >= 0]
        assert all(b < valid[row] for b in chosen), f"row {row} chose the tail: {chosen}"


@pytest.mark.upstream("valid_blocks")
@pytest.mark.parametrize("full_width", [True, False])
@torch.inference_mode()
def test_block_scores_kernel_valid_blocks(full_width, device):
    """The kernel writes each row's valid block count; only ``FULL_WIDTH`` scores the
    tail; without it NaN blocks are pinned (DeepSelect leaves NaN rows partial)."""
    rng = random.Random(3)
    torch.manual_seed(3)
    rows, width, block_size = 8, 75, 4
    nblocks = -(-width // block_size)
    row_ks, row_ke = bounds(rng, rows, width, True, device)
    logits = torch.randn(rows, width, device=device)
    logits[1, int(row_ks[1]) + 1] = NAN  # row 1: full context
    scores = torch.full((rows, nblocks), UNWRITTEN, dtype=torch.float32, device=device)
    valid = torch.full((rows,), UNWRITTEN, dtype=torch.int32, device=device)
    extra = {"PIN_NEWEST": True} if "PIN_NEWEST" in _kernel_args(cb._block_scores_kernel) else {}

    cb._block_scores_kernel[(rows, 32)](
        logits,
        row_ks,
        row_ke,
        scores,
        valid,
        *logits.stride(),
        row_ks.stride(0),
        row_ke.stride(0),
        scores.stride(0),
        width,
        nblocks,
        block_size,
        True,
        1,
        TILE=128,
        FULL_WIDTH=full_width,
        **extra,
    )

    counts = valid_counts(row_ks, row_ke, rows, width, block_size)
    assert valid.tolist() == counts
    ref = ref_block_scores(logits, row_ks, row_ke, block_size, pin_nan=not full_width)
    scores = scores.cpu()
    for row in range(rows):
        n = nblocks if full_width else counts[row]
        torch.testing.assert_close(scores[row, :n], ref[row, :n], equal_nan=True)
        assert (scores[row, n:] == UNWRITTEN).all(), f"row {row}: wrote past {n} blocks"


def _score_dtype_cases():
    cases = [(torch.float32, None)]
    if HAS_SCORE_DTYPE:
        cases += [(torch.float32, torch.float32), (torch.bfloat16, torch.float32)]
    return cases


@pytest.mark.upstream("deep_select")
@pytest.mark.parametrize("with_starts", [False, True])
@pytest.mark.parametrize("row_repeat", [1, 2])
@pytest.mark.parametrize("logits_dtype, score_dtype", _score_dtype_cases())
@torch.inference_mode()
def test_deep_select_gets_valid_blocks(
    with_starts, row_repeat, logits_dtype, score_dtype, device, interpret, monkeypatch
):
    """Without DCP, DeepSelect (where available) takes aligned score rows, scored only
    up to each row's valid block count, NaN blocks pinned, and those counts as ``end``."""
    fake = FakeDeepSelect()
    for name, value in deep_select_patches(fake).items():
        monkeypatch.setattr(cb, name, value)
    rng = random.Random(row_repeat)
    torch.manual_seed(1)
    rows, width, block_size, topk_blocks = 8, 70, 4, 4
    row_ks, row_ke = bounds(rng, -(-rows // row_repeat), width, with_starts, device)
    logits = torch.randn(rows, width, device=device).to(logits_dtype)
    start = int(row_ks[1]) if row_ks is not None else 0
    logits[row_repeat, start + 2] = NAN  # group 1 has its full context
    kw = {"score_dtype": score_dtype} if score_dtype is not None else {}

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat, **kw)

    assert len(fake.calls) == 1, "DeepSelect was not taken"
    call = fake.calls[0]
    counts = valid_counts(row_ks, row_ke, rows, width, block_size, row_repeat)
    assert call["end"].dtype == torch.int32 and call["end"].tolist() == counts
    assert call["topk"] == topk_blocks
    scores = call["scores"].cpu()
    assert scores.dtype == (score_dtype or logits_dtype)
    assert scores.shape == (rows, -(-width // block_size))
    ref = ref_block_scores(
        logits, row_ks, row_ke, block_size, row_repeat, dtype=scores.dtype, pin_nan=True
    )
    for row in range(rows):
        n = counts[row]
        torch.testing.assert_close(scores[row, :n], ref[row, :n], rtol=0, atol=0)
    assert not (out == UNWRITTEN).any()


@pytest.mark.upstream("deep_select")
@pytest.mark.parametrize("why", ["fewer_blocks_than_topk", "unsupported", "out_misaligned"])
@torch.inference_mode()
def test_deep_select_declined_uses_torch_topk(why, device, monkeypatch):
    """When DeepSelect declines, the full-width torch.topk path answers as before."""
    for name, value in deep_select_patches(refuse).items():
        monkeypatch.setattr(cb, name, value)
    if why == "unsupported":
        monkeypatch.setattr(cb, "is_deep_select_supported", lambda *a, **k: False)
    rng = random.Random(5)
    torch.manual_seed(5)
    rows, width, block_size = 6, 50, 4
    topk_blocks = 20 if why == "fewer_blocks_than_topk" else 4  # 13 blocks
    row_ks, row_ke = bounds(rng, rows, width, True, device)
    logits = torch.randn(rows, width, device=device)
    out = None
    if why == "out_misaligned":
        buffer = torch.full((rows, topk_blocks + 1), UNWRITTEN, dtype=torch.int32, device=device)
        out = buffer[:, :topk_blocks]  # row stride 20 bytes

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, out=out)

    assert_selects_top(out, ref_block_scores(logits, row_ks, row_ke, block_size), topk_blocks)


@pytest.mark.upstream("deep_select")
@pytest.mark.parametrize("extra", [0, 1], ids=["topk_eq_blocks", "topk_past_blocks"])
@torch.inference_mode()
def test_deep_select_block_boundary(extra, device, monkeypatch):
    """DeepSelect takes the scores when there are as many blocks as asked
    (``nblocks == topk_blocks``), and declines one block short of them."""
    fake = FakeDeepSelect()
    patches = deep_select_patches(fake if not extra else refuse)
    for name, value in patches.items():
        monkeypatch.setattr(cb, name, value)
    torch.manual_seed(4)
    rows, width, block_size = 4, 40, 4  # 10 blocks
    row_ks, row_ke = bounds(random.Random(4), rows, width, True, device)
    logits = torch.randn(rows, width, device=device)
    topk_blocks = -(-width // block_size) + extra
    # Output rows 64 bytes apart: aligned for DeepSelect, whatever topk_blocks is.
    buffer = torch.full((rows, 16), UNWRITTEN, dtype=torch.int32, device=device)

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, out=buffer[:, :topk_blocks])

    assert len(fake.calls) == (0 if extra else 1), "DeepSelect taken, or not, wrongly"
    assert_selects_top(out, ref_block_scores(logits, row_ks, row_ke, block_size), topk_blocks)


#: (logits dtype, score dtype) pairs for 0.34.0's score_dtype.
SCORE_DTYPE_PAIRS = [
    (torch.float32, torch.float16),
    (torch.float16, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float32),
]


def ref_select(scores: torch.Tensor, topk_blocks: int, device) -> list[list[int]]:
    """What the torch.topk path selects from these block scores, tie order included:
    torch.topk on the device over the same row length, -1 for -inf and past the count."""
    top = scores.to(device).topk(min(topk_blocks, scores.shape[1]), dim=-1)
    ids = torch.where(top.values != -INF, top.indices, -1).cpu().tolist()
    return [row + [-1] * (topk_blocks - len(row)) for row in ids]


def near_ties(rows: int, width: int, dtype) -> torch.Tensor:
    """Logits whose block maxima are distinct in fp32 but collide once rounded to fp16
    or bf16 (1 + offsets far below their precision, in shuffled order), so that a
    selection from unrounded scores shows in the tie order and the chosen set."""
    offsets = torch.randperm(rows * width).float().view(rows, width) * 1e-6
    return (1.0 + offsets).to(dtype)


class TopkDtypes:
    """``torch.Tensor.topk`` spy: the dtype of every tensor it is called on
    (``method()`` is what to set as ``torch.Tensor.topk``)."""

    def __init__(self) -> None:
        self.seen: list[torch.dtype] = []
        self.topk = torch.Tensor.topk

    def method(self):
        def topk(tensor, *args, **kwargs):
            self.seen.append(tensor.dtype)
            return self.topk(tensor, *args, **kwargs)

        return topk


@pytest.mark.upstream("score_dtype")
@pytest.mark.parametrize("logits_dtype, score_dtype", SCORE_DTYPE_PAIRS)
@pytest.mark.parametrize("with_starts", [False, True])
@torch.inference_mode()
def test_score_dtype_torch_topk(
    logits_dtype, score_dtype, with_starts, device, interpret, monkeypatch
):
    """``score_dtype`` sets the block scores' dtype: the top-k gets scores of that dtype,
    and the selection is exactly torch.topk of the fp32 block maxima rounded to it, the
    tie order among the blocks that the rounding made equal included."""
    rng = random.Random(7)
    torch.manual_seed(7)
    rows, width, block_size, topk_blocks = 6, 61, 3, 5
    row_ks, row_ke = bounds(rng, rows, width, with_starts, device)
    logits = near_ties(rows, width, logits_dtype).to(device)
    spy = TopkDtypes()
    monkeypatch.setattr(torch.Tensor, "topk", spy.method())

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, score_dtype=score_dtype)

    monkeypatch.undo()
    assert spy.seen == [score_dtype], f"the top-k got {spy.seen}, not {score_dtype}"
    ref = ref_block_scores(logits, row_ks, row_ke, block_size, dtype=score_dtype)
    assert out.cpu().tolist() == ref_select(ref, topk_blocks, device)


@pytest.mark.upstream("rocm_topk")
@torch.inference_mode()
def test_rocm_topk_taken_without_dcp(device, monkeypatch):
    """0.31.0 on ROCm: the fused top-k gets the pinned full-width scores."""
    calls = []

    def fake(scores, row_ks, row_ke, nblocks, topk_blocks, out, row_repeat, block_size):
        calls.append(scores.clone())
        top = scores.topk(min(topk_blocks, nblocks), dim=-1)
        out.fill_(-1)
        out[:, : top.indices.shape[1]] = torch.where(top.values > -INF, top.indices, -1).to(
            out.dtype
        )

    monkeypatch.setattr(cb, "current_platform", RocmPlatform())
    monkeypatch.setattr(cb, "_rocm_select_topk", fake)
    rng = random.Random(2)
    torch.manual_seed(2)
    rows, width, block_size, topk_blocks = 4, 40, 4, 3
    row_ks, row_ke = bounds(rng, rows, width, True, device)
    logits = torch.randn(rows, width, device=device)

    out = select(logits, row_ks, row_ke, topk_blocks, block_size)

    assert len(calls) == 1
    ref = ref_block_scores(logits, row_ks, row_ke, block_size)
    torch.testing.assert_close(calls[0].cpu(), ref, rtol=0, atol=0)
    assert_selects_top(out, ref, topk_blocks)


# -- DCP: the same selection as one rank, whatever local top-k paths exist -------------


def on_rank(count: int, rank: int) -> int:
    return len(range(rank, count, WORLD_SIZE))


def make_dcp_problem(
    seed: int, rows: int, row_repeat: int, block_size: int, dtype, near_ties: bool = False
):
    """Decode rows over a padded static width (garbage past each row's end), sharded
    with interleave 1; each shard padded by whole local blocks of garbage. With
    ``near_ties``, logits distinct in fp32 that rounding to fp16/bf16 makes equal."""
    rng = random.Random(seed)
    g = block_size
    groups = -(-rows // row_repeat)
    lengths = [
        rng.choice([1, g - 1, g, g + 1, 3 * g + 1, rng.randint(1, 6 * g)]) for _ in range(groups)
    ]
    if groups >= 2:
        lengths[1] = 0  # rows without context select nothing
    width = max(lengths) + 2 * g + rng.randint(0, g)
    logits = torch.full((rows, width), GARBAGE)
    for row in range(rows):
        n = lengths[row // row_repeat]
        logits[row, :n] = 1.0 + torch.randperm(n) * 1e-6 if near_ties else torch.randn(n) * 100
    logits = logits.to(dtype)
    shards = []
    for rank in range(WORLD_SIZE):
        cols = list(range(rank, width, WORLD_SIZE))
        local = torch.full((rows, len(cols) + 2 * (g // WORLD_SIZE)), GARBAGE, dtype=dtype)
        local[:, : len(cols)] = logits[:, cols]
        ke = torch.tensor([on_rank(n, rank) for n in lengths], dtype=torch.int32)
        shards.append((local, ke))
    row_ke = torch.tensor(lengths, dtype=torch.int32)
    return logits, row_ke, shards, -(-width // g)


def dcp_on_rank(ctx, shards, topk_blocks, block_size, row_ke, max_blocks, row_repeat, opts):
    """Rank task: the DCP selection with the local-only top-k paths standing by to fail."""
    import torch.distributed as dist

    logits, ke = shards[ctx.rank]
    dev = ctx.device
    calls = []
    all_reduce = dist.all_reduce
    topk = TopkDtypes()

    def spy(tensor, *args, **kwargs):
        calls.append((tuple(tensor.shape), tensor.dtype))
        return all_reduce(tensor, *args, **kwargs)

    saved = {}
    patches = {}
    if opts["local_topk"] == "deep_select":
        patches = deep_select_patches(refuse)
    elif opts["local_topk"] == "rocm":
        patches = {"current_platform": RocmPlatform(), "_rocm_select_topk": refuse}
    if opts.get("reduce_bytes") is not None:
        patches["_DCP_REDUCE_BYTES"] = opts["reduce_bytes"]
    kw = {"score_dtype": opts["score_dtype"]} if opts.get("score_dtype") else {}
    for name, value in patches.items():
        saved[name] = getattr(cb, name)
        setattr(cb, name, value)
    dist.all_reduce = spy
    torch.Tensor.topk = topk.method()
    try:
        out = torch.full((logits.shape[0], topk_blocks), UNWRITTEN, dtype=torch.int32, device=dev)
        cb.select_candidate_blocks(
            logits.to(dev),
            None,
            ke.to(dev),
            topk_blocks,
            block_size // ctx.world_size,
            out,
            row_repeat,
            dcp_group=dcp_group(ctx),
            global_row_ke=row_ke.to(dev),
            global_block_size=block_size,
            max_global_blocks=max_blocks,
            **kw,
        )
    finally:
        dist.all_reduce = all_reduce
        torch.Tensor.topk = topk.topk
        for name, value in saved.items():
            setattr(cb, name, value)
    return out.cpu(), calls, topk.seen


@pytest.fixture
def ranks(rank_pool):
    return rank_pool(WORLD_SIZE)


def check_dcp(
    ranks,
    device,
    *,
    local_topk,
    score_dtype=None,
    logits_dtype=torch.float32,
    reduce_rows=None,
    seed=0,
    rows=7,
    row_repeat=1,
    block_size=8,
    topk_blocks=3,
    near=False,
):
    """Every rank selects what one rank selects on the global logits (exactly, tie
    order included: the score rows have the same length and values), reduces exactly
    in the scores' dtype (``score_dtype``, else the logits'; int32 keys where the NaN
    fix is baked) and hands the top-k scores of the scores' dtype."""
    logits, row_ke, shards, max_blocks = make_dcp_problem(
        seed, rows, row_repeat, block_size, logits_dtype, near_ties=near
    )
    reduce_bytes = None if reduce_rows is None else reduce_rows * max_blocks * 4
    opts = {"local_topk": local_topk, "score_dtype": score_dtype, "reduce_bytes": reduce_bytes}
    results = ranks.run(
        dcp_on_rank, shards, topk_blocks, block_size, row_ke, max_blocks, row_repeat, opts
    )

    kw = {"score_dtype": score_dtype} if score_dtype is not None else {}
    single = select(
        logits.to(device), None, row_ke.to(device), topk_blocks, block_size, row_repeat, **kw
    )
    scores = ref_block_scores(logits, None, row_ke, block_size, row_repeat, dtype=score_dtype)
    assert_selects_top(single, scores, topk_blocks)
    for rank, (out, calls, topk_dtypes) in enumerate(results):
        assert topk_dtypes == [score_dtype or logits_dtype] * len(calls), (rank, topk_dtypes)
        assert_selects_top(out, scores, topk_blocks)
        assert out.tolist() == single.cpu().tolist(), f"rank {rank} differs from one rank"
        for row in range(rows):
            if int(row_ke[row // row_repeat]) == 0:
                assert out[row].tolist() == [-1] * topk_blocks, f"rank {rank} row {row}"
        assert calls == results[0][1], "ranks made different collectives"
        # The reduce runs in the scores' dtype (score_dtype where given: 0.34.0), or on
        # the int32 keys of the proposed NaN fix (fixes/91-nan-max-reduce.diff).
        want = torch.int32 if NAN_KEYS else (score_dtype or logits_dtype)
        assert all(dtype == want for _, dtype in calls), (calls, want)
        assert sum(shape[0] for shape, _ in calls) == rows
        if reduce_rows is not None:
            assert len(calls) == -(-rows // reduce_rows)
    assert torch.equal(results[0][0], results[1][0]), "ranks selected differently"
    return results


@pytest.mark.upstream("deep_select")
@pytest.mark.parametrize("row_repeat", [1, 2])
@pytest.mark.parametrize("reduce_rows", [None, 2])
@torch.inference_mode()
def test_dcp_never_takes_deep_select(row_repeat, reduce_rows, ranks, device):
    """DeepSelect available and willing: under DCP the selection still comes from
    torch.topk on the reduced full-width scores (DeepSelect would fail the test)."""
    check_dcp(
        ranks,
        device,
        local_topk="deep_select",
        row_repeat=row_repeat,
        reduce_rows=reduce_rows,
        seed=row_repeat,
    )


@pytest.mark.upstream("rocm_topk")
@pytest.mark.parametrize("row_repeat", [1, 2])
@pytest.mark.parametrize("reduce_rows", [None, 2])
@torch.inference_mode()
def test_dcp_never_takes_rocm_topk(row_repeat, reduce_rows, ranks, device):
    """On ROCm the fused top-k bounds rows by their local extent; DCP must not use it."""
    check_dcp(
        ranks,
        device,
        local_topk="rocm",
        row_repeat=row_repeat,
        reduce_rows=reduce_rows,
        seed=row_repeat,
    )


@pytest.mark.upstream("score_dtype")
@pytest.mark.parametrize("logits_dtype, score_dtype", SCORE_DTYPE_PAIRS)
@pytest.mark.parametrize("reduce_rows", [None, 3])
@torch.inference_mode()
def test_dcp_score_dtype(logits_dtype, score_dtype, reduce_rows, ranks, device, interpret):
    """Under DCP the scores are ``score_dtype``'s; rounding is monotone, so the MAX
    of the ranks' rounded maxima is the single-rank score, and the selection (ties
    that the rounding made included) the single rank's (DeepSelect standing by)."""
    check_dcp(
        ranks,
        device,
        local_topk="deep_select" if HAS_DEEP_SELECT else None,
        score_dtype=score_dtype,
        logits_dtype=logits_dtype,
        reduce_rows=reduce_rows,
        rows=6,
        row_repeat=2,
        near=True,
    )


#: Logits dtypes the release's kernels run under the interpreter and on a GPU (bf16 only
#: where the expectations say the release handles it).
LOGITS_DTYPES = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("logits_dtype", LOGITS_DTYPES, ids=["fp16", "bf16"])
@torch.inference_mode()
def test_dcp_low_precision_logits(logits_dtype, ranks, device, expected):
    """fp16 and bf16 logits without ``score_dtype``: DCP selects what one rank selects
    (scores, reduce and top-k in the logits' dtype)."""
    if (
        logits_dtype == torch.bfloat16
        and expected is not None
        and not expected.data.get("bf16", True)
    ):
        pytest.skip("this release's block-score kernel does not run bf16 (expectations)")
    check_dcp(ranks, device, local_topk=None, logits_dtype=logits_dtype, rows=6, near=True)


@pytest.mark.parametrize("block_size", [2, 8])
@pytest.mark.parametrize("seed", [0, 1])
@torch.inference_mode()
def test_dcp_padded_local_tails(block_size, seed, ranks, device):
    """Every release: shards padded by whole local blocks of garbage (the static
    workspace); the reduce sees -inf there (``FULL_WIDTH`` on 0.33.0+), never garbage.
    (NaN under DCP: test_dcp.py::test_dcp_nan_logits.)"""
    local_topk = "deep_select" if HAS_DEEP_SELECT else ("rocm" if HAS_ROCM_TOPK else None)
    check_dcp(
        ranks,
        device,
        local_topk=local_topk,
        block_size=block_size,
        seed=seed,
        rows=5,
        topk_blocks=4,
    )
