"""Real signals sent to a real ``bakery apply`` at many points of a bake.

The bake copies a synthetic tree of 1 000 files (a local ``--vllm PATH``), commits it and
applies one diff; it takes about a second. Each signal is sent at a point of its write phase
(timed from the "Writing" line bakery prints when its staging folder exists), spread from
its start to past its end. Afterwards ``--out`` is absent or complete: its manifest's head
is HEAD, the very commit an uninterrupted bake makes, ``git status`` is clean and ``git
fsck`` passes. SIGINT and SIGTERM exit 130 and leave nothing beside ``--out``; after SIGKILL,
the next bake removes what the killed one left. The same for a cached release of 1 000 files
served by a local index (the usual case), whose cache entry must stay intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import git as _git

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

N_FILES = 1000
#: Fractions of the write phase at which a signal is sent.
POINTS = (0.0, 0.2, 0.45, 0.7, 0.95, 1.3)


@dataclass
class Big:
    root: Path
    tree: Path
    series: Path
    head: str  # HEAD of an uninterrupted bake
    write_s: float  # seconds from "Writing" to exit, uninterrupted
    digest: dict[str, bytes] = field(default_factory=dict)


def _tree_state(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()
    }


class Bakery:
    """A ``python -m bakery apply`` process whose stderr is read as it comes."""

    def __init__(
        self, big: Big, out: Path, group: bool = False, env: dict[str, str] | None = None
    ) -> None:
        self.lines: list[str] = []
        self.writing = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bakery",
                "apply",
                str(big.series),
                "--vllm",
                str(big.tree),
                "--out",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=big.root,
            start_new_session=group,
            env=env,
            # SIGINT may be ignored where the tests run (a background job): not in bakery.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if line.startswith("Writing"):
                self.writing.set()
        self.writing.set()  # EOF: it will not write any more

    def wait(self) -> int:
        code = self.proc.wait(timeout=120)
        self.reader.join(timeout=10)
        return code

    @property
    def stderr(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Big:
    root = tmp_path_factory.mktemp("signals")
    tree = root / "tree"
    for i in range(N_FILES):
        p = tree / "vllm" / f"pkg{i // 100:02d}" / f"m{i:04d}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# module {i}\nVALUE = {i}\n" + "x = 1\n" * 20)
    series = root / "series"
    (series / "diffs").mkdir(parents=True)
    (series / "series.toml").write_text('strip = 1\nroot = ""\n')
    (series / "diffs" / "01-value.diff").write_text(
        "--- a/vllm/pkg00/m0000.py\n+++ b/vllm/pkg00/m0000.py\n"
        "@@ -1,3 +1,3 @@\n # module 0\n-VALUE = 0\n+VALUE = 42\n x = 1\n"
    )
    out = root / "baseline"
    b = Big(root, tree, series, "", 0.0)
    # A module fixture runs before conftest's isolation: keep this bake off the user's home.
    run = Bakery(
        b,
        out,
        env={
            **os.environ,
            "BAKERY_CACHE_DIR": str(root / "cache"),
            "BAKERY_HOME": str(root),
            "HOME": str(root / "home"),
        },
    )
    assert run.writing.wait(60)
    start = time.monotonic()
    assert run.wait() == 0, run.stderr
    b.write_s = time.monotonic() - start
    b.head = _manifest(out)["head"]
    b.digest = _tree_state(tree)
    return b


def _manifest(out: Path) -> dict[str, str]:
    return json.loads((out / ".bakery" / "manifest.json").read_text())  # type: ignore[no-any-return]


def assert_absent_or_complete(
    out: Path,
    head: str,
    changed: tuple[str, str] = ("vllm/pkg00/m0000.py", "# module 0\nVALUE = 42\n"),
) -> str:
    if not out.exists():
        assert not out.is_symlink()
        return "absent"
    manifest = _manifest(out)  # a tree at --out without its manifest is a half-written one
    assert manifest["head"] == head
    assert _git(out, "rev-parse", "HEAD").strip() == head
    assert _git(out, "status", "--porcelain", "--untracked-files=all") == ""
    _git(out, "fsck", "--no-progress")
    assert (out / changed[0]).read_text().startswith(changed[1])
    return "complete"


def debris(out: Path) -> list[str]:
    return sorted(
        p.name
        for p in out.parent.iterdir()
        if p.name.startswith(f".{out.name}.") or p.name == f"{out.name}.failed"
    )


def _send(run: Bakery, sig: int, delay: float, group: bool = False) -> None:
    assert run.writing.wait(60), run.stderr
    time.sleep(delay)
    try:
        if group:
            os.killpg(run.proc.pid, sig)  # as a terminal's Ctrl-C: git and cp get it too
        else:
            os.kill(run.proc.pid, sig)
    except ProcessLookupError:
        pass  # it had finished


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_at_many_points(big: Big, sig: int, tmp_path: Path) -> None:
    out = tmp_path / "out"  # the same --out for every point: later ones replace a complete one
    seen = []
    for frac in POINTS:
        run = Bakery(big, out)
        _send(run, sig, frac * big.write_s, group=False)
        code = run.wait()
        state = assert_absent_or_complete(out, big.head)
        assert "Traceback" not in run.stderr, run.stderr
        assert code in (130, 0), (frac, code, run.stderr)
        if code == 0:
            assert state == "complete"  # it finished before the signal came
        else:  # a clean Ctrl-C says so, in one line
            assert run.stderr.splitlines()[-1] == "interrupted", run.stderr
        assert debris(out) == [], (frac, debris(out))
        seen.append((frac, code, state))
    assert any(code == 130 for _, code, _ in seen), seen
    assert _tree_state(big.tree) == big.digest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_the_process_group(big: Big, sig: int, tmp_path: Path) -> None:
    """Ctrl-C reaches git and cp as well as bakery: still 130, still nothing half-written."""
    out = tmp_path / "out"
    for frac in (0.15, 0.5):
        run = Bakery(big, out, group=True)
        _send(run, sig, frac * big.write_s, group=True)
        code = run.wait()
        assert_absent_or_complete(out, big.head)
        assert code in (130, 0), (frac, code, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        assert debris(out) == []


def test_sigkill_debris_is_cleaned_by_the_next_bake(big: Big, tmp_path: Path) -> None:
    out = tmp_path / "out"
    left = []
    for frac in (0.0, 0.3, 0.6, 0.9):  # at 0.0 the killed bake leaves a cp running
        run = Bakery(big, out)
        _send(run, signal.SIGKILL, frac * big.write_s, group=False)
        code = run.wait()
        assert code in (-signal.SIGKILL, 0)
        assert_absent_or_complete(out, big.head)
        left += debris(out)
    run = Bakery(big, out)
    assert run.wait() == 0, run.stderr
    assert assert_absent_or_complete(out, big.head) == "complete"
    assert debris(out) == [], f"left by SIGKILL and not cleaned: {debris(out)}"
    assert left, "no SIGKILL hit the write phase: the bake is too fast to test"
    assert _tree_state(big.tree) == big.digest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_starting(big: Big, sig: int, tmp_path: Path) -> None:
    """A signal while Python imports the CLI: nothing written; 130 once bakery's code runs."""
    out = tmp_path / "out"
    run = Bakery(big, out)
    time.sleep(0.25)
    os.kill(run.proc.pid, sig)
    code = run.wait()
    assert code in (130, -sig, 0), run.stderr
    assert "Traceback" not in run.stderr
    assert_absent_or_complete(out, big.head)
    assert debris(out) == []


# --- a cached release (the usual case: the tree comes from the cache's git repository) -----------


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Big, dict[str, str]]]:
    """vLLM 9.9.0 of 1 000 files from a local index, in a cache of its own, baked once."""
    from tests.test_concurrency import _series, sdist, serve_index

    root = tmp_path_factory.mktemp("release")
    with serve_index() as index:
        index.add("vllm-9.9.0.tar.gz", sdist("9.9.0", files=N_FILES))
        env = {
            **os.environ,
            "BAKERY_INDEX_URL": index.url,
            "BAKERY_CACHE_DIR": str(root / "cache"),
            "BAKERY_HOME": str(root),
            "HOME": str(root / "home"),
        }
        b = Big(root, Path("9.9.0"), _series(root), "", 0.0)
        run = Bakery(b, root / "baseline", env=env)
        assert run.writing.wait(120)
        start = time.monotonic()
        assert run.wait() == 0, run.stderr
        b.write_s = time.monotonic() - start
        b.head = _manifest(root / "baseline")["head"]
        yield b, env


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_a_cached_release_bake(
    release: tuple[Big, dict[str, str]], sig: int, tmp_path: Path
) -> None:
    """The same, baking a cached release: the cache entry stays intact too."""
    big, env = release
    out = tmp_path / "out"
    changed = ("vllm/x.py", "a\nB\nc\n")
    for frac in POINTS:
        run = Bakery(big, out, env=env)
        _send(run, sig, frac * big.write_s)
        code = run.wait()
        assert code in (130, 0), (frac, code, run.stderr)
        assert "Traceback" not in run.stderr
        assert_absent_or_complete(out, big.head, changed)
        assert debris(out) == []
    cached = big.root / "cache" / "trees" / "vllm-9.9.0"
    assert _git(cached, "status", "--porcelain", "--untracked-files=all") == ""
    assert (cached.with_name("vllm-9.9.0.json")).is_file()
