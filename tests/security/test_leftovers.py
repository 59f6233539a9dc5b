"""The earlier attack suites' leftovers (issue 46), each fixed:

- a FIFO (or a link to ``/dev/zero``) in a local ``--vllm`` tree, named like a file the
  series changes, hung ``apply``: ``find_moved`` read every file of that name;
- wheels whose zip64 records lie ended in tracebacks (OverflowError, EINVAL, ValueError)
  instead of one line;
- the syntax merge had a bound per file only (30 s of CPU): a port of many files had none;
- the quick exit of a multi-rank verify left a ``pymp-*`` folder in TMPDIR each time, and
  a TMPDIR deeper than about 70 characters stopped every multi-rank verify (AF_UNIX paths).

Each hang case runs under an alarm: a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery.bake.merge import find_moved
from bakery.errors import SourceError
from bakery.formats import zipraw
from tests.support.archives import raw_zip
from tests.support.trees import Tiny, cache_release

Cli = Callable[..., Result]


@contextlib.contextmanager
def within(seconds: int) -> Iterator[None]:
    def hung(*_: object) -> None:
        raise AssertionError(f"still blocked after {seconds} s: a FIFO was opened")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --- a FIFO where a moved file is looked for ---------------------------------------------------


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_find_moved_reads_only_regular_files(tmp_path: Path, special: str) -> None:
    content = b"".join(b"def f%d():\n    return %d\n" % (i, i) for i in range(40))
    for where in ("vllm/a", "vllm/b"):
        (tmp_path / where).mkdir(parents=True)
    trap = tmp_path / "vllm" / "a" / "k.py"  # walked first
    if special == "fifo":
        os.mkfifo(trap)
    else:
        trap.symlink_to("/dev/zero")
    (tmp_path / "vllm" / "b" / "k.py").write_bytes(content.replace(b"39", b"40"))
    with within(20):
        assert find_moved(tmp_path, "vllm/k.py", content) == "vllm/b/k.py"
        # without the base's content (no base release), a special file is no candidate
        (tmp_path / "vllm" / "b" / "k.py").unlink()
        assert find_moved(tmp_path, "vllm/k.py", None) is None


def test_apply_on_a_local_tree_with_a_fifo_of_a_changed_files_name_ends(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    """The series' base release is cached, so the diagnosis compares the base's file with
    every file of its name in the tree: the FIFO among them is never opened."""
    files = {
        p.relative_to(tiny.src).as_posix(): p.read_text()
        for p in tiny.src.rglob("*")
        if p.is_file()
    }
    cache_release("0.1.0", files)
    toml = tiny.series / "series.toml"
    toml.write_text('base = "0.1.0"\n' + toml.read_text())
    (tiny.src / "vllm" / "model_executor" / "k.py").unlink()  # gone from the target
    (tiny.src / "vllm" / "elsewhere").mkdir()
    os.mkfifo(tiny.src / "vllm" / "elsewhere" / "k.py")
    with within(60):
        r = cli("apply", "demo", "--vllm", tiny.src, "--out", tmp_path / "out")
    assert r.exit_code in (1, 2), r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


# --- zip64 records that lie --------------------------------------------------------------------


def _zip64_wheel() -> tuple[bytes, int]:
    """A small wheel whose end of central directory is in zip64 records (as a wheel over
    65,535 members or 4 GiB has it); and where its zip64 end record starts."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n in ("vllm/__init__.py", "vllm-1.0.dist-info/METADATA", "vllm-1.0.dist-info/RECORD"):
            with z.open(n, "w", force_zip64=True) as f:
                f.write(b"x = 1\n" * 20)
    raw = buf.getvalue()
    at = raw.rfind(b"PK\x05\x06")
    _, _, _, _, count, cd_size, cd_offset, _ = zipraw.END.unpack_from(raw, at)
    body = raw[:at]
    end64 = zipraw.END64.pack(zipraw.SIG_END64, 44, 45, 45, 0, 0, count, count, cd_size, cd_offset)
    loc = zipraw.LOCATOR64.pack(zipraw.SIG_LOCATOR64, 0, len(body), 1)
    end = zipraw.END.pack(zipraw.SIG_END, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return body + end64 + loc + end, len(body)


def _read_all(tmp_path: Path, data: bytes) -> zipraw.Directory:
    p = tmp_path / "w.whl"
    p.write_bytes(data)
    with p.open("rb") as fh:
        d = zipraw.read_directory(fh.fileno(), p.name)
        for e in d.entries:
            zipraw.read_member(fh.fileno(), e, p.name)
    return d


def test_an_honest_zip64_wheel_is_read(tmp_path: Path) -> None:
    data, _ = _zip64_wheel()
    assert len(_read_all(tmp_path, data).entries) == 3


#: (field of the zip64 end record or locator, offset in the record, the lie)
LIES = [
    ("locator: end record offset", 56 + 8, 2**64 - 1),  # OverflowError before
    ("locator: end record offset", 56 + 8, 2**63),
    ("locator: end record offset", 56 + 8, 10**6),  # past the file
    ("end record: entries", 24, 0),  # ValueError (zip() strict) before
    ("end record: directory size", 40, 2**64 - 1),
    ("end record: directory offset", 48, 2**63 + 5),
]


@pytest.mark.parametrize(("field", "at", "lie"), LIES)
def test_zip64_records_that_lie_are_one_line(tmp_path: Path, field: str, at: int, lie: int) -> None:
    data, end64 = _zip64_wheel()
    bad = bytearray(data)
    struct.pack_into("<Q", bad, end64 + at, lie)
    if field == "end record: entries":
        struct.pack_into("<Q", bad, end64 + 32, lie)
    try:
        d = _read_all(tmp_path, bytes(bad))
    except SourceError as e:
        assert "\n" not in e.message
    else:
        assert d.entries == []  # no member stated: nothing to read, nothing invented


def test_a_locator_at_the_very_start_is_one_line(tmp_path: Path) -> None:
    end = zipraw.END.pack(zipraw.SIG_END, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with pytest.raises(SourceError, match="zip64"):
        _read_all(tmp_path, end)  # no room for a locator before it: EINVAL before


def test_a_zip64_extra_field_longer_than_itself_is_one_line(tmp_path: Path) -> None:
    """The zip64 field says 200 bytes where the entry's extra holds 16 (struct.error)."""
    name = b"vllm/a.py"
    extra = struct.pack("<HHQQ", 0x0001, 200, 6, 6)
    data = raw_zip([("vllm/a.py", b"x = 1\n", 0, zlib.crc32(b"x = 1\n"), 6)])
    cd = data.index(b"PK\x01\x02")
    head = bytearray(data[cd : cd + 46])
    struct.pack_into("<II", head, 20, 0xFFFFFFFF, 0xFFFFFFFF)  # csize, usize: in zip64
    struct.pack_into("<H", head, 30, len(extra))
    central = bytes(head) + name + extra
    body = data[:cd]
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(body), 0)
    with pytest.raises(SourceError, match="zip64"):
        _read_all(tmp_path, body + central + end)


def test_random_lies_in_a_zip64_wheel_are_one_line_or_read(tmp_path: Path) -> None:
    """A seeded sweep over the wheel's bytes: every outcome is a SourceError or a read."""
    data, _ = _zip64_wheel()
    rng = random.Random(46)
    extreme = [0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1, len(data) + 10]
    for _ in range(1500):
        bad = bytearray(data)
        pos = rng.randrange(len(bad) - 8)
        if rng.random() < 0.5:
            bad[pos] = rng.randrange(256)
        else:
            struct.pack_into("<Q", bad, pos, rng.choice(extreme))
        with contextlib.suppress(SourceError):
            _read_all(tmp_path, bytes(bad))


# --- one bound for a whole port's syntax merges -------------------------------------------------

BASE = b"def f(a, b):\n    return a + b\n"
OURS = b"def f(a, b, *, c=0):\n    return a + b\n"
THEIRS = b"def f(a, b, key=None):\n    return a + b\n"


def _spin(*_: object) -> None:
    """A merge that never ends (the stand-in for a hostile file; run in the child)."""
    while True:
        pass


def test_a_commands_syntax_merges_stop_at_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakery.bake import synchild

    forks: list[int] = []
    real_fork = os.fork

    def fork() -> int:
        forks.append(1)
        return real_fork()

    monkeypatch.setattr(synchild, "merge_python", _spin)
    monkeypatch.setattr(synchild, "SYNTAX_SECONDS", 2)
    monkeypatch.setattr(os, "fork", fork)
    with synchild.budget(3) as spent:
        whys = []
        for _ in range(6):  # six hostile files: 6 x 2 s without the budget
            with pytest.raises(synchild.Bounded) as stopped:
                synchild.merge_bounded(BASE, OURS, THEIRS)
            whys.append(str(stopped.value))
    # a child for 2 s, perhaps one for the second left; none once the budget is spent
    assert len(forks) == spent.runs <= 2 and spent.runs + spent.refused == 6
    assert whys[-1] == "this command's syntax merges used their 3 s"
    assert -2 < spent.left < 1  # children are killed at what is left, not 7 s each


def test_a_budget_leaves_honest_merges_alone() -> None:
    from bakery.bake import synchild

    with synchild.budget(30) as spent:
        merged = synchild.merge_bounded(BASE, OURS, THEIRS)
    assert b"c=0" in merged.content and b"key=None" in merged.content
    assert spent.runs == 1 and 0 < spent.left < 30
    # outside any command: the per-file bound only, as before
    assert synchild.merge_bounded(BASE, OURS, THEIRS).content == merged.content


def test_an_inner_budget_is_the_outer_one() -> None:
    from bakery.bake import synchild

    with synchild.budget(5) as outer, synchild.budget(500) as inner:
        assert inner is outer and inner.total == 5


def test_port_runs_its_syntax_merges_under_the_budget(
    cli: Cli, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port that a syntax merge proposes (tests/security/test_default_outputs.py)
    falls back to lines once the command's budget is spent, and says why."""
    from bakery.bake import synchild
    from tests.support.series import DIFF, X_PY

    s = home / "launcher" / "s"
    (s / "diffs").mkdir(parents=True)
    (s / "tests").mkdir()
    (s / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (s / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (s / "diffs" / "01-x.diff").write_text(DIFF)
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/x.py": X_PY})
    moved = "".join(f"{c}\n" for c in "qrstuvwxyz")
    cache_release("1.1.0", {"vllm/__init__.py": "", "vllm/x.py": moved})
    monkeypatch.setattr(synchild, "SYNTAX_TOTAL_SECONDS", 0)
    r = cli("port", "s", "--vllm", "1.1.0", "--dry-run")
    assert "syntax merges used their 0 s" in r.output, r.output
    assert "merged-syntax" not in r.output


# --- the quick exit's temp folders, and a short socket folder whatever TMPDIR is ----------------

RANKS = """
def _rank(ctx):
    return ctx.rank


def test_two_ranks(rank_pool):
    assert sorted(rank_pool(2).run(_rank)) == [0, 1]
"""


@pytest.fixture
def short_tmpdir() -> Iterator[Path]:
    """A TMPDIR short enough that the run's own folder is made inside it."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="lo-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("depth", ["short", "deep"])
def test_a_multi_rank_verify_leaves_no_temp_folder_and_runs_under_a_deep_tmpdir(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cpu_ranks: None,
    short_tmpdir: Path,
    depth: str,
) -> None:
    """The ranks start from multiprocessing's fork server, which makes a pymp-* folder
    (left behind by the quick exit) holding its AF_UNIX socket (too long a path under a
    TMPDIR of more than about 70 characters: pytest's INTERNALERROR)."""
    from tests.support.trees import write_files
    from tests.support.verify import run_tests

    tmpdir = short_tmpdir if depth == "short" else tmp_path / ("d" * 40) / ("e" * 40)
    tmpdir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    tests = write_files(tmp_path / "t", {"test_ranks.py": RANKS})
    tree = write_files(tmp_path / "tree", {"vllm/__init__.py": ""})
    result = run_tests(tests, tree, interpret=True, pytest_args=["-q"], jobs=1)
    assert (result.exit_code, result.passed) == (0, 1)
    assert list(tmpdir.iterdir()) == []  # no pymp-*, nothing of the run's own
