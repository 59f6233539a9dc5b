# SPDX-License-Identifier: Apache-2.0
"""Single-rank candidate blocks of the baked tree against plain-torch references.

The code under test is the baked tree's own file, loaded under its real name by
bakery's plugin: ``bakery verify dcp2 [--interpret]``. What a release does with NaN
comes from the release the bake's manifest records (``../expectations.toml``), never
from the tree under test.
"""

import itertools
import random

import pytest
import torch
from dcp2_support import load_kernel

cb = load_kernel()

WIDTHS = [1, 50, 133]
BLOCK_SIZES = [1, 3]
TOPK_BLOCKS = [1, 4, 64]
ROW_REPEATS = [1, 3]
WITH_STARTS = [False, True]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SEEDS = [0]
INF = float("inf")
NAN = float("nan")
#: Written into outputs before a call, to see which entries the kernel wrote.
UNWRITTEN = -7


def make_bounds(
    rng: random.Random, groups: int, width: int, with_starts: bool, device: torch.device
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Per-group packed bounds: empty, full, partial, and past the logits width.

    They are strided views into longer buffers, as the runner's are."""
    starts, ends = [], []
    for group in range(groups):
        start = rng.randint(0, width) if with_starts else 0
        kind = group % 4 if groups > 1 else 1
        if kind == 0:
            end = start  # no context
        elif kind == 1:
            end = width
        elif kind == 2:
            end = rng.randint(start, width)
        else:
            end = width + rng.randint(1, 3)  # the logits are narrower than the row
        starts.append(start)
        ends.append(max(end, start))

    def strided(values: list[int]) -> torch.Tensor:
        buffer = torch.full((2 * groups + 2,), 10**6, dtype=torch.int32)
        buffer[: 2 * groups : 2] = torch.tensor(values, dtype=torch.int32)
        return buffer.to(device)[::2]

    return (strided(starts) if with_starts else None), strided(ends)


def bounds(row_ks: torch.Tensor | None, row_ke: torch.Tensor, group: int) -> tuple[int, int]:
    start = int(row_ks[group]) if row_ks is not None else 0
    return start, int(row_ke[group])


def ref_block_scores(
    logits: torch.Tensor,
    row_ks: torch.Tensor | None,
    row_ke: torch.Tensor,
    block_size: int,
    row_repeat: int,
    pin_newest: bool = True,
) -> torch.Tensor:
    """Block maximum relative to the row start (NaN wins, empty is -inf), newest pinned."""
    rows, width = logits.shape
    nblocks = -(-width // block_size)
    x = logits.cpu()
    scores = torch.full((rows, nblocks), -INF, dtype=logits.dtype)
    for row in range(rows):
        start, end = bounds(row_ks, row_ke, row // row_repeat)
        for block in range(nblocks):
            lo = start + block * block_size
            hi = min(lo + block_size, end, width)
            if lo < hi:
                seg = x[row, lo:hi]
                scores[row, block] = NAN if bool(seg.isnan().any()) else seg.max()
        if pin_newest and end > start and (end - start - 1) // block_size < nblocks:
            scores[row, (end - start - 1) // block_size] = INF
    return scores.to(logits.device)


def ref_select(
    logits: torch.Tensor,
    row_ks: torch.Tensor | None,
    row_ke: torch.Tensor,
    topk_blocks: int,
    block_size: int,
    row_repeat: int,
    nan_selected: bool,
) -> torch.Tensor:
    """Top-k blocks by score, ``-1`` for padding (``-inf``) and past the block count."""
    rows, width = logits.shape
    out = torch.full((rows, topk_blocks), -1, dtype=torch.int32)
    if not width:
        return out
    scores = ref_block_scores(logits, row_ks, row_ke, block_size, row_repeat)
    k = min(topk_blocks, scores.shape[1])
    top = scores.topk(k, dim=-1)  # on the kernel's device: the same tie order
    values, indices = top.values.cpu(), top.indices.cpu()
    keep = values > -INF
    if nan_selected:
        keep |= values.isnan()
    out[:, :k] = torch.where(keep, indices, -1).to(torch.int32)
    return out


def ref_mask(
    logits: torch.Tensor,
    row_ks: torch.Tensor | None,
    row_ke: torch.Tensor,
    candidates: torch.Tensor,
    block_size: int,
    row_repeat: int,
) -> torch.Tensor:
    """The docstring's promise, "mask packed logits outside causal bounds and
    request-local candidates": a column survives when it lies in the row's bounds
    [start, end) and its block, (col - start) // block_size, is a candidate.

    Upstream's packed clamp, for a row whose context runs past the logits (end past
    the width): a candidate block of that context that starts at or past the width
    stands for the row's last column in the logits, which survives if in bounds.
    Candidates are what the selection emits: blocks of the row's context, or -1."""
    rows, width = logits.shape
    out = torch.full((rows, width), -INF, dtype=logits.dtype)
    x = logits.cpu()
    for row in range(rows):
        start, end = bounds(row_ks, row_ke, row // row_repeat)
        for block in {int(b) for b in candidates[row].tolist() if b >= 0}:
            first = start + block * block_size
            assert first < end, "not a block of the row's context"
            lo, hi = (first, first + block_size) if first < width else (width - 1, width)
            lo, hi = max(lo, start), min(hi, end, width)
            out[row, lo:hi] = x[row, lo:hi]
    return out.to(logits.device)


def select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat=1):
    out = torch.full(
        (logits.shape[0], topk_blocks), UNWRITTEN, dtype=torch.int32, device=logits.device
    )
    cb.select_candidate_blocks(logits, row_ks, row_ke, topk_blocks, block_size, out, row_repeat)
    return out


def probe_nan_selected(device: torch.device) -> bool:
    """Whether this tree selects a NaN-scored block (else it writes -1 in its slot).
    Block size 1 keeps the reduction out of the probe: only the store decides."""
    logits = torch.full((1, 2), NAN, device=device)
    out = select(logits, None, torch.tensor([2], dtype=torch.int32, device=device), 2, 1)
    assert out[0].tolist() in ([0, 1], [-1, 1]), "block 1 (newest) must be pinned"
    return out[0, 0].item() == 0


@pytest.fixture(scope="module")
def nan_selected(expected, release, device: torch.device) -> bool:
    """Whether a NaN-scored block is selected (0.31.0+: "NaN scores can occur during
    warmup; only -inf denotes padding") or written -1 (0.30.0): the one place where
    releases legitimately differ, so the reference follows the release of the bake."""
    if expected is None:
        # No release to go by (a tree without a bake's manifest): the tree's own rule.
        return probe_nan_selected(device)
    return {"select": True, "drop": False}[expected.data["nan_rule"]]


@torch.inference_mode()
def test_nan_rule_of_the_release(nan_selected, release, expected, device):
    """The tree follows its release's NaN rule (a port must not lose upstream's)."""
    if expected is None:
        pytest.skip(f"release {release} has no expectations: no NaN rule to hold the tree to")
    rule = "selects" if nan_selected else "drops (-1)"
    assert probe_nan_selected(device) is nan_selected, (
        f"vLLM {release} {rule} NaN-scored blocks upstream; this tree does not"
    )


def _covering(*options):
    """Every width x block size x top-k, the other options taking turns (each case
    costs a kernel launch under the interpreter; the full product tests no more)."""
    rest = list(itertools.product(*options[3:]))
    return [(*head, *rest[i % len(rest)]) for i, head in enumerate(itertools.product(*options[:3]))]


#: (rows, width, block size, top-k blocks, row_repeat, with starts)
SELECT_CASES = [
    (9, *case) for case in _covering(WIDTHS, BLOCK_SIZES, TOPK_BLOCKS, ROW_REPEATS, WITH_STARTS)
] + [(1, 50, 3, 4, 1, True)]


@pytest.mark.parametrize(
    "num_rows, width, block_size, topk_blocks, row_repeat, with_starts",
    SELECT_CASES,
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_select_candidate_blocks(
    num_rows, width, block_size, topk_blocks, row_repeat, with_starts, seed, device, nan_selected
):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    logits = torch.randn(num_rows, width, device=device)
    groups = -(-num_rows // row_repeat)
    row_ks, row_ke = make_bounds(rng, groups, width, with_starts, device)

    out = select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat)

    ref = ref_select(logits, row_ks, row_ke, topk_blocks, block_size, row_repeat, nan_selected)
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


@pytest.mark.parametrize("block_size", [1, 3, 4])
@pytest.mark.parametrize("with_starts", WITH_STARTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_nan_and_inf_logits(
    block_size, with_starts, dtype, seed, device, nan_selected, interpret, expected, release
):
    """NaN anywhere in a block makes the block's score NaN; all -inf scores as padding."""
    if dtype is torch.bfloat16 and expected is not None and not expected.data.get("bf16", True):
        # Its block max reduces bf16 values (0.33.0+ casts them to fp32 first).
        if interpret:
            pytest.skip(
                f"vLLM {release}'s kernel needs bf16 constants: Triton's interpreter has none"
            )
        pytest.skip(f"vLLM {release}'s block-score kernel does not compile for bf16 on a GPU")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    num_rows, width, topk_blocks = 6, 40, 16
    logits = torch.randn(num_rows, width, device=device).to(dtype)
    special = torch.rand(num_rows, width, device=device)
    logits[special < 0.05] = NAN
    logits[(special > 0.9) & (special < 0.95)] = -INF
    logits[1, :] = -INF  # a row whose blocks are all -inf but the pinned one
    row_ks, row_ke = make_bounds(rng, num_rows, width, with_starts, device)
    row_ke[1] = width

    out = select(logits, row_ks, row_ke, topk_blocks, block_size)

    ref = ref_select(logits, row_ks, row_ke, topk_blocks, block_size, 1, nan_selected)
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)


def test_block_max_propagates_nan_when_compiled(ttir_probe):
    """The block max propagates NaN (``arith.maximumf``, never ``arith.maxnumf``) in the
    compiled kernel: a CPU check of what only a GPU run shows by value (the interpreter
    propagates NaN whatever the kernel asks). Compiles to TTIR in a process of its own,
    started when collection ended (conftest.py)."""
    import subprocess

    try:
        stdout, stderr = ttir_probe.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        ttir_probe.kill()
        ttir_probe.communicate()
        raise
    assert ttir_probe.returncode == 0, stderr[-3000:]
    ops = dict(line.split() for line in stdout.splitlines())
    assert int(ops["arith.maximumf"]) > 0 and int(ops["arith.maxnumf"]) == 0, ops


@pytest.mark.parametrize("with_starts", WITH_STARTS)
@torch.inference_mode()
def test_padding_and_newest_block(with_starts, device):
    """Worked by hand: the newest block is pinned first even when it scores lowest;
    rows without context select nothing; missing blocks are -1."""
    shift = 5 if with_starts else 0
    width, block_size, topk_blocks = 16 + shift, 4, 6
    logits = -torch.arange(width, dtype=torch.float32, device=device).repeat(4, 1)
    ends = torch.tensor([0, 3, 16, 9], dtype=torch.int32, device=device) + shift
    starts = torch.full((4,), shift, dtype=torch.int32, device=device) if with_starts else None

    out = select(logits, starts, ends, topk_blocks, block_size)

    expected = [
        [-1, -1, -1, -1, -1, -1],
        [0, -1, -1, -1, -1, -1],
        [3, 0, 1, 2, -1, -1],
        [2, 0, 1, -1, -1, -1],
    ]
    assert out.tolist() == expected


@pytest.mark.parametrize("num_rows", [1, 3])
@torch.inference_mode()
def test_zero_width(num_rows, device):
    logits = torch.empty((num_rows, 0), device=device)
    ends = torch.zeros(num_rows, dtype=torch.int32, device=device)
    out = select(logits, None, ends, 5, 4)
    assert out.tolist() == [[-1] * 5] * num_rows


@pytest.mark.parametrize("width", [0, 8])
@torch.inference_mode()
def test_zero_rows(width, device):
    """No rows: nothing is written, neither to the zero-row views nor to the memory
    their buffers hold past them (a kernel launched for one row would write row 0)."""
    logits_buffer = torch.full((2, width), 5.0, device=device)
    out_buffer = torch.full((2, 3), UNWRITTEN, dtype=torch.int32, device=device)
    ends_buffer = torch.tensor([4, 4], dtype=torch.int32, device=device)
    logits, out, ends = logits_buffer[:0], out_buffer[:0], ends_buffer[:0]
    cb.select_candidate_blocks(logits, None, ends, 3, 4, out)
    candidates = torch.zeros((2, 3), dtype=torch.int32, device=device)[:0]
    cb.apply_candidate_mask(logits, None, ends, candidates, 4)
    assert out_buffer.cpu().tolist() == [[UNWRITTEN] * 3] * 2
    assert logits_buffer.cpu().tolist() == [[5.0] * width] * 2


@pytest.mark.parametrize("topk_blocks", [3, 7, 300])
@torch.inference_mode()
def test_topk_beyond_blocks_and_strided_out(topk_blocks, device, nan_selected):
    """More blocks asked than exist: -1 past them. Only the ``topk_blocks`` columns
    of a strided ``out`` are written."""
    torch.manual_seed(0)
    logits = torch.randn(3, 10, device=device)
    ends = torch.tensor([10, 10, 4], dtype=torch.int32, device=device)
    buffer = torch.full((3, topk_blocks + 4), UNWRITTEN, dtype=torch.int32, device=device)
    out = buffer[:, 2 : 2 + topk_blocks]

    cb.select_candidate_blocks(logits, None, ends, topk_blocks, 2, out)

    ref = ref_select(logits, None, ends, topk_blocks, 2, 1, nan_selected)
    torch.testing.assert_close(out.cpu(), ref, rtol=0, atol=0)
    assert (buffer[:, :2] == UNWRITTEN).all() and (buffer[:, 2 + topk_blocks :] == UNWRITTEN).all()


@pytest.mark.parametrize("pin_newest", [True, False])
@pytest.mark.parametrize("block_size", [1, 3, 4])
@pytest.mark.parametrize("row_repeat", ROW_REPEATS)
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_block_scores_pin_newest(pin_newest, block_size, row_repeat, seed, device):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    num_rows, width = 7, 45
    logits = torch.randn(num_rows, width, device=device)
    logits[0, 3] = NAN
    row_ks, row_ke = make_bounds(rng, -(-num_rows // row_repeat), width, True, device)

    scores = cb._block_scores(logits, row_ks, row_ke, block_size, row_repeat, pin_newest)

    ref = ref_block_scores(logits, row_ks, row_ke, block_size, row_repeat, pin_newest)
    torch.testing.assert_close(scores, ref, rtol=0, atol=0, equal_nan=True)
    if not pin_newest:
        assert not scores.isposinf().any()


#: (rows, width, block size, candidates per row, row_repeat, with starts)
MASK_CASES = [
    (9, *case) for case in _covering(WIDTHS, [1, 3, 8], [1, 5], ROW_REPEATS, WITH_STARTS)
] + [(1, 133, 8, 5, 1, True)]


@pytest.mark.parametrize(
    "num_rows, width, block_size, num_candidates, row_repeat, with_starts",
    MASK_CASES,
    ids=lambda v: str(v),
)
@pytest.mark.parametrize("seed", SEEDS)
@torch.inference_mode()
def test_apply_candidate_mask(
    num_rows, width, block_size, num_candidates, row_repeat, with_starts, seed, device
):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    logits = torch.randn(num_rows, width, device=device)
    groups = -(-num_rows // row_repeat)
    row_ks, row_ke = make_bounds(rng, groups, width, with_starts, device)
    # What a selection may hold: blocks of the row's context (some past the logits
    # width where the context runs past it), repeats, and -1 padding.
    candidates = torch.full((num_rows, num_candidates), -1, dtype=torch.int32)
    for row in range(num_rows):
        start, end = bounds(row_ks, row_ke, row // row_repeat)
        blocks = -(-(end - start) // block_size)
        for slot in range(num_candidates):
            candidates[row, slot] = rng.randrange(-1, blocks) if blocks else -1
    candidates = candidates.to(device)

    masked = logits.clone()
    cb.apply_candidate_mask(masked, row_ks, row_ke, candidates, block_size, row_repeat)

    ref = ref_mask(logits, row_ks, row_ke, candidates, block_size, row_repeat)
    torch.testing.assert_close(masked, ref, rtol=0, atol=0)


#: (start, width, block size, end, candidate): the candidate block starts exactly at the
#: width (start + b * block == width), one before it, and one past it.
CLAMP_CASES = [
    (0, 8, 4, 12, 2),  # 0 + 2 * 4 == 8: clamped, the last column stands for it
    (2, 10, 4, 14, 2),  # 2 + 2 * 4 == 10
    (0, 9, 4, 12, 2),  # 8 < 9: block 2 is column 8 itself
    (1, 7, 3, 14, 3),  # 1 + 3 * 3 == 10 > 7
]


@pytest.mark.parametrize("start, width, block_size, end, block", CLAMP_CASES)
@pytest.mark.parametrize("row_repeat", [1, 2])
@torch.inference_mode()
def test_mask_clamp_boundary(start, width, block_size, end, block, row_repeat, device):
    """Upstream's packed clamp at its boundary: a candidate block whose first column is
    the logits width (or past it) keeps the row's last column; one that starts inside
    keeps its own columns."""
    logits = torch.arange(1.0, row_repeat * width + 1).view(row_repeat, width).to(device)
    row_ks = torch.tensor([start], dtype=torch.int32, device=device)
    row_ke = torch.tensor([end], dtype=torch.int32, device=device)
    candidates = torch.tensor([[block, -1]] * row_repeat, dtype=torch.int32, device=device)
    masked = logits.clone()
    cb.apply_candidate_mask(masked, row_ks, row_ke, candidates, block_size, row_repeat)
    first = start + block * block_size
    kept = [width - 1] if first >= width else list(range(first, min(first + block_size, width)))
    for row in range(row_repeat):
        got = [c for c in range(width) if masked[row, c] != -INF]
        assert got == kept, f"row {row} kept columns {got}, the clamp keeps {kept}"


@pytest.mark.parametrize("value", [None, "0", "", "true", "1"])
def test_prefill_timing_follows_env(value, monkeypatch):
    """The module reads ``DSV41_PREFILL_TIMING`` once, at import: exactly "1" turns
    prefill timing on. The tree's file is executed afresh under each value."""
    import importlib.util

    if value is None:
        monkeypatch.delenv("DSV41_PREFILL_TIMING", raising=False)
    else:
        monkeypatch.setenv("DSV41_PREFILL_TIMING", value)
    spec = importlib.util.spec_from_file_location("_dcp2_timing_probe", cb.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._PREFILL_TIMING is (value == "1")


class _FakeEvent:
    made = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        type(self).made += 1

    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_FakeEvent") -> float:
        return 1.5


@pytest.fixture
def fake_events(monkeypatch):
    monkeypatch.setattr(_FakeEvent, "made", 0)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(cb, "PREFILL_ACC", {"earlier": 2.0})
    return _FakeEvent


@pytest.mark.parametrize("num_rows", [1, 1024])
@torch.inference_mode()
def test_prefill_timing_inert_when_disabled(num_rows, device, fake_events, monkeypatch):
    monkeypatch.setattr(cb, "_PREFILL_TIMING", False)

    def capturing() -> bool:
        raise AssertionError("a disabled timer must not query the stream")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", capturing)
    # Zero width: the timer wraps the whole call, the kernels need not run.
    logits = torch.randn(num_rows, 0, device=device)
    ends = torch.zeros(num_rows, dtype=torch.int32, device=device)

    out = select(logits, None, ends, 1, 1)
    with cb._PrefillTimer("other", 1 << 20) as timer:
        pass

    assert (out == -1).all()
    assert not timer.on
    assert fake_events.made == 0
    assert cb.PREFILL_ACC == {"earlier": 2.0}


@torch.inference_mode()
def test_prefill_timing_enabled(device, fake_events, monkeypatch):
    monkeypatch.setattr(cb, "_PREFILL_TIMING", True)
    capturing = [False]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])

    for num_tokens in (1023, 1024, 5000):
        with cb._PrefillTimer("phase", num_tokens):
            pass
    capturing[0] = True
    with cb._PrefillTimer("phase", 4096):
        pass
    capturing[0] = False
    logits = torch.randn(1024, 0, device=device)
    ends = torch.zeros(1024, dtype=torch.int32, device=device)
    out = select(logits, None, ends, 1, 1)

    assert (out == -1).all()
    assert fake_events.made == 6  # two per timed block: 1024, 5000 and the selection
    assert cb.prefill_acc_take() == {"earlier": 2.0, "phase": 3.0, "candidates": 1.5}
    assert cb.PREFILL_ACC == {}


def test_prefill_accumulator(monkeypatch):
    monkeypatch.setattr(cb, "PREFILL_ACC", {})
    assert cb.prefill_acc_take() == {}
    cb.prefill_acc_add("a", 1.25)
    cb.prefill_acc_add("a", 0.5)
    cb.prefill_acc_add("b", 3.0)
    taken = cb.prefill_acc_take()
    assert taken == {"a": 1.75, "b": 3.0}
    assert cb.prefill_acc_take() == {}
    taken["a"] = 0.0  # a copy: the accumulator stays empty
    cb.prefill_acc_add("b", 1.0)
    assert cb.prefill_acc_take() == {"b": 1.0}


@pytest.mark.parametrize("value", [None, "", "0", "true"])
def test_cpu_guard_without_interpreter(value, monkeypatch):
    """CPU tensors are refused unless TRITON_INTERPRET=1 (read at call time)."""
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    logits = torch.randn(2, 8)
    ends = torch.full((2,), 8, dtype=torch.int32)
    out = torch.full((2, 2), UNWRITTEN, dtype=torch.int32)

    assert not cb._cpu_kernels_allowed()
    with pytest.raises(AssertionError):
        cb.select_candidate_blocks(logits, None, ends, 2, 4, out)
    with pytest.raises(AssertionError):
        cb.apply_candidate_mask(logits, None, ends, out, 4)
    assert (out == UNWRITTEN).all()


def test_cpu_guard_with_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cb._cpu_kernels_allowed()
