"""Other tools' own test cases through bakery's CLI: ``../shared/peer/peer_patch.py`` (beside
the project, when that folder exists) replays git's t41xx ``git apply`` calls and
python-unidiff's sample diffs, and compares each result with the peer test's and GNU patch's.
The cases are GPL and stay in that folder: this test only runs the driver and reads its
summary. It skips where the folder, GNU patch or the ``bakery`` script is missing.

Promise: no case crashes (a traceback, another exit status, several error lines, a hang), and
no suite agrees with its peers on fewer cases than it did when issue 47 closed (README "What
diffs bakery takes" lists every remaining case that is not ``same``, with its reason).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import PROJECT

PEER = PROJECT.parent / "shared" / "peer" / "peer_patch.py"
BAKERY = Path(sys.executable).parent / "bakery"
#: Per suite, the cases that were ``same`` when issue 47 closed (git 73 and unidiff 12 before).
FLOOR = {"git": 86, "unidiff": 13}
_SUITE = re.compile(r"^  (\w+): (\d+) same, (\d+) differ, (\d+) refused, (\d+) crash$", re.M)


@pytest.mark.slow
@pytest.mark.skipif(
    not PEER.is_file(), reason=f"no {PEER} (the peer cases live beside the project)"
)
@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
@pytest.mark.skipif(not BAKERY.is_file(), reason=f"no {BAKERY} script (pip install -e .)")
def test_peer_cases_never_crash_and_agree_as_often_as_before(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(PEER), str(BAKERY), "--jobs", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    suites = {m[0]: tuple(map(int, m[1:])) for m in _SUITE.findall(proc.stdout)}
    assert set(FLOOR) <= set(suites), proc.stdout[-2000:] + proc.stderr[-2000:]
    crashes = [line for line in proc.stdout.splitlines() if line.startswith("CRASH")]
    assert not crashes and proc.returncode == 0, "\n".join(crashes) or proc.stderr[-2000:]
    for suite, floor in FLOOR.items():
        same = suites[suite][0]
        assert same >= floor, f"{suite}: {same} same, fewer than {floor}:\n{proc.stdout[-3000:]}"
