"""Real signals sent to a real ``bakery apply`` at many points of a bake.

The bake copies a synthetic tree of 1 000 files (a local ``--vllm PATH``), commits it and
applies one diff; it takes about a second. Each signal is sent when the bake reaches a
stage, seen from outside (never after a guessed sleep): the "Writing" line bakery prints
once its staging folder exists, the copy under way in that folder, the manifest written
into it (the last step before it takes --out's place), and the tree at --out. Afterwards
``--out`` is absent or complete: its manifest's head is HEAD, the very commit an
uninterrupted bake makes, ``git status`` is clean and ``git fsck`` passes. A signal while
the tree is written exits 130 with nothing at --out and nothing beside it; one at the end
may find the bake done (0, complete) but never half-done; after SIGKILL, the next bake
removes what the killed one left. The same for a cached release of 1 000 files served by a
local index (the usual case), whose cache entry must stay intact; and a signal while Python
imports the CLI exits 130.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.repos import git as _git

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

#: An ``-X importtime`` line of a module that only bakery.cli.app imports.
CLI_IMPORT = re.compile(r"^import time:.*\|\s+(typer|rich)(\.\w+)*$")

N_FILES = 1000
#: Stages at which a signal is sent (see ``reached``). At the first two, most of the work
#: is still ahead: the bake must be interrupted. At the last two it may have finished.
EARLY = ("writing", "copying")
LATE = ("manifest", "moved")
STAGES = EARLY + LATE


@dataclass
class Big:
    root: Path
    tree: Path
    series: Path
    head: str  # HEAD of an uninterrupted bake
    digest: dict[str, bytes] = field(default_factory=dict)


def _tree_state(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()
    }


class Bakery:
    """A ``python -m bakery apply`` process whose stderr is read as it comes."""

    def __init__(
        self,
        big: Big,
        out: Path,
        group: bool = False,
        env: dict[str, str] | None = None,
        python: tuple[str, ...] = (),
    ) -> None:
        self.lines: list[str] = []
        self.out = out
        self.writing = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *python,
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

    def staging(self) -> list[Path]:
        return list(self.out.parent.glob(f".{self.out.name}.bakery-*"))

    def reached(self, stage: str) -> bool:
        """Whether the bake has reached ``stage`` (seen in its output and its folders)."""
        if stage == "writing":
            return self.writing.is_set()
        if stage == "copying":
            return any((s / "vllm").exists() for s in self.staging())
        if stage == "manifest":
            return any((s / ".bakery" / "manifest.json").exists() for s in self.staging())
        if stage == "moved":
            return (self.out / ".bakery" / "manifest.json").exists()
        raise AssertionError(stage)

    def wait_for(self, stage: str) -> bool:
        """Poll until the bake reaches ``stage``: False if it exited first."""
        assert self.writing.wait(60) or stage != "writing", self.stderr
        while not self.reached(stage):
            if self.proc.poll() is not None:
                return False
            time.sleep(0.0005)
        return True

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
    b = Big(root, tree, series, "")
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
    assert run.wait() == 0, run.stderr
    b.head = _manifest(out)["head"]
    b.digest = _tree_state(tree)
    return b


def _manifest(out: Path) -> dict[str, str]:
    return json.loads((out / ".bakery" / "manifest.json").read_text())


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


def _send(run: Bakery, sig: int, stage: str, group: bool = False) -> bool:
    """Send ``sig`` once the bake reaches ``stage``; False when it had finished before (a
    late stage can pass too fast to be seen). An early stage must be seen."""
    if not run.wait_for(stage):
        assert stage in LATE, (stage, run.stderr)
        return False
    try:
        if group:
            os.killpg(run.proc.pid, sig)  # as a terminal's Ctrl-C: git and cp get it too
        else:
            os.kill(run.proc.pid, sig)
    except ProcessLookupError:
        return False  # it had just finished
    return True


def assert_outcome(stage: str, code: int, state: str, interrupted: int = 130) -> None:
    """Early: interrupted, nothing at --out. Late: interrupted or done, never half-done;
    once the tree is at --out nothing takes it away."""
    if stage in EARLY:
        assert (code, state) == (interrupted, "absent"), stage
    else:
        assert code in (interrupted, 0), (stage, code)
        assert state == "complete" or code == interrupted, (stage, code, state)
        if stage == "moved":
            assert state == "complete", (stage, code)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_at_many_points(big: Big, sig: int, tmp_path: Path) -> None:
    out = tmp_path / "out"  # the same --out for every stage: later ones replace a complete one
    for stage in STAGES:
        run = Bakery(big, out)
        sent = _send(run, sig, stage)
        code = run.wait()
        state = assert_absent_or_complete(out, big.head)
        assert "Traceback" not in run.stderr, run.stderr
        if sent:
            assert_outcome(stage, code, state)
            if code == 130:  # a clean Ctrl-C says so, in one line
                assert run.stderr.splitlines()[-1] == "interrupted", run.stderr
        else:
            assert (code, state) == (0, "complete"), (stage, run.stderr)
        assert debris(out) == [], (stage, debris(out))
    assert _tree_state(big.tree) == big.digest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_the_process_group(big: Big, sig: int, tmp_path: Path) -> None:
    """Ctrl-C reaches git and cp as well as bakery: still 130, still nothing half-written."""
    out = tmp_path / "out"
    for stage in EARLY:
        run = Bakery(big, out, group=True)
        assert _send(run, sig, stage, group=True)
        code = run.wait()
        state = assert_absent_or_complete(out, big.head)
        assert_outcome(stage, code, state)
        assert "Traceback" not in run.stderr, run.stderr
        assert debris(out) == []


def test_sigkill_debris_is_cleaned_by_the_next_bake(big: Big, tmp_path: Path) -> None:
    out = tmp_path / "out"
    left = []
    for stage in ("writing", "copying", "manifest"):  # "writing" leaves a cp running
        run = Bakery(big, out)
        sent = _send(run, signal.SIGKILL, stage)
        code = run.wait()
        state = assert_absent_or_complete(out, big.head)
        if sent:
            assert_outcome(stage, code, state, interrupted=-signal.SIGKILL)
        left += debris(out)
    run = Bakery(big, out)
    assert run.wait() == 0, run.stderr
    assert assert_absent_or_complete(out, big.head) == "complete"
    assert debris(out) == [], f"left by SIGKILL and not cleaned: {debris(out)}"
    assert left, "no SIGKILL hit the write phase: the bake is too fast to test"
    assert _tree_state(big.tree) == big.digest


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_starting(big: Big, sig: int, tmp_path: Path) -> None:
    """A signal while Python imports the CLI (bakery's __main__ runs, typer or rich is
    being imported, as ``-X importtime`` shows): 130, no traceback, nothing written."""
    out = tmp_path / "out"
    run = Bakery(big, out, python=("-X", "importtime"))
    deadline = time.monotonic() + 60
    while not any(CLI_IMPORT.search(line) for line in list(run.lines)):
        assert run.proc.poll() is None and time.monotonic() < deadline, run.stderr[-2000:]
        time.sleep(0.0005)
    os.kill(run.proc.pid, sig)
    code = run.wait()
    assert code == 130, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert "Writing" not in run.stderr
    assert assert_absent_or_complete(out, big.head) == "absent"
    assert debris(out) == []


# --- a cached release (the usual case: the tree comes from the cache's git repository) -----------


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Big, dict[str, str]]]:
    """vLLM 9.9.0 of 1 000 files from a local index, in a cache of its own, baked once."""
    from tests.support.archives import sdist
    from tests.support.index import serve_index
    from tests.support.series import index_series

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
        b = Big(root, Path("9.9.0"), index_series(root), "")
        run = Bakery(b, root / "baseline", env=env)
        assert run.writing.wait(120)
        assert run.wait() == 0, run.stderr
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
    for stage in STAGES:
        run = Bakery(big, out, env=env)
        sent = _send(run, sig, stage)
        code = run.wait()
        assert "Traceback" not in run.stderr
        state = assert_absent_or_complete(out, big.head, changed)
        if sent:
            assert_outcome(stage, code, state)
        else:
            assert (code, state) == (0, "complete"), (stage, run.stderr)
        assert debris(out) == []
    cached = big.root / "cache" / "trees" / "vllm-9.9.0"
    assert _git(cached, "status", "--porcelain", "--untracked-files=all") == ""
    assert (cached.with_name("vllm-9.9.0.json")).is_file()
