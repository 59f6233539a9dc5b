"""Ctrl-C at any moment, start-up included: the ``bakery`` script as pip installs it.

The script pip writes for ``[project.scripts]`` imports the entry point's module and calls
it. A Ctrl-C (or SIGTERM) while that import pulls in the CLI (typer, rich, as
``-X importtime`` shows) exits 130 with the one line "interrupted" and no traceback; so does
one while the command runs, and a command that finishes exits as it says (the one handler,
bakery.cli.console.exit_code).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
#: An ``-X importtime`` line of a module that only the CLI imports.
CLI_IMPORT = re.compile(r"^import time:.*\|\s+(typer|rich)(\.\w+)*$")


def _script() -> str:
    """The console script's code, as pip's wrapper runs it."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["bakery"]
    module, func = spec.split(":")
    return f"import sys\nfrom {module} import {func}\nsys.argv[0] = 'bakery'\nsys.exit({func}())\n"


def _start(home: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-c", _script(), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=home,
        env={**os.environ, "BAKERY_HOME": str(home)},
        # SIGINT may be ignored where the tests run (a background job): not in bakery.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        lines.extend(proc.stderr)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_while_the_script_imports_the_cli(sig: int, tmp_path: Path) -> None:
    (tmp_path / "launcher").mkdir()
    proc, lines = _start(tmp_path, "list")
    deadline = time.monotonic() + 60
    while not any(CLI_IMPORT.search(line) for line in list(lines)):
        assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-2000:]
        time.sleep(0.0005)
    os.kill(proc.pid, sig)
    code = proc.wait(timeout=60)
    time.sleep(0.05)  # the reader's last lines
    err = "".join(line for line in lines if not line.startswith("import time:"))
    assert code == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"


def test_the_script_runs_a_command(tmp_path: Path) -> None:
    """The same script, left alone: the command's own exit code (2 and one line for an
    unknown series), no traceback."""
    (tmp_path / "launcher").mkdir()
    proc, lines = _start(tmp_path, "apply", "nosuch", "--vllm", str(tmp_path))
    code = proc.wait(timeout=60)
    time.sleep(0.05)
    err = [line for line in lines if not line.startswith("import time:")]
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("error: unknown series 'nosuch'"), err
