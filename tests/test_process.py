"""bakery.process, the one door for child processes: a failed child is one line with the
command, its exit code and the tail of its output; a missing program is its own error;
an interrupted caller leaves no child behind; and no module but the door starts one."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bakery import process

SRC = Path(__file__).resolve().parents[1] / "src" / "bakery"
#: Modules that start processes without the door, each with why.
OUTSIDE_THE_DOOR = {
    "process.py": "the door itself",
    "bake/synchild.py": "the bounded syntax merge: a fork whose CPU and memory limits are "
    "set per merge (a pool's worker would carry its CPU time from one merge to the next)",
}
#: Python workers of a library pool (no program started): matrix's spawn pool, the
#: ranks of the tests' pytest process.
POOLS = {"commands/matrix.py", "testing/dist.py"}


def _starts(tree: ast.Module) -> list[int]:
    """Lines of the module that start a process themselves."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        name = owner.id if isinstance(owner, ast.Name) else ""
        if (name == "subprocess" and node.func.attr != "CompletedProcess") or (
            name == "os" and node.func.attr in {"fork", "system", "popen", "execv", "execvp"}
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_door_starts_a_process() -> None:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        lines = _starts(ast.parse(path.read_text()))
        if lines and rel not in POOLS:
            found[rel] = lines
    assert set(found) == set(OUTSIDE_THE_DOOR), found


def test_a_failed_child_is_one_line_with_command_code_and_tail() -> None:
    code = (
        "import sys; print('out')\n"
        "for i in range(9): print(f'err {i}', file=sys.stderr)\n"
        "sys.exit(3)"
    )
    proc = process.run([sys.executable, "-c", code])
    with pytest.raises(process.ProcessFailed) as info:
        process.check(proc, "the probe")
    message = info.value.message
    assert message.startswith("the probe failed (`") and "exit 3" in message
    assert "err 8" in message and "err 3" not in message  # the tail, not the whole output
    assert "\n" not in message
    assert process.check(process.run([sys.executable, "-c", "print('ok')"]), "x") == b"ok\n"
    assert process.check(process.run(["sh", "-c", "exit 1"]), "diff", ok=(0, 1)) == b""


def test_a_missing_program_or_folder_is_not_started(tmp_path: Path) -> None:
    with pytest.raises(process.NotStarted, match="cannot start"):
        process.run(["bakery-no-such-program-here"])
    with pytest.raises(process.NotStarted):
        process.run(["true"], cwd=tmp_path / "gone")


def test_a_timeout_kills_the_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    with pytest.raises(subprocess.TimeoutExpired):
        process.run([sys.executable, "-c", code], timeout=1)
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped, not left running


def test_an_interrupted_caller_leaves_no_child(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"

    def interrupt() -> None:
        while not pidfile.exists() or not pidfile.read_text():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    # Ctrl-C as Python's default handler raises it (a pytest-xdist worker ignores SIGINT)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            process.run_shown([sys.executable, "-c", code], log=tmp_path / "log")
    finally:
        signal.signal(signal.SIGINT, saved)
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


def test_shown_output_goes_to_the_log(tmp_path: Path) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(2)"
    log = tmp_path / "log"
    assert process.run_shown([sys.executable, "-c", code], log=log) == 2
    assert log.read_text().split() == ["to", "stdout", "to", "stderr"]
