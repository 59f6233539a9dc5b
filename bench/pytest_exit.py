"""The end of verify's pytest process (issue 27): ``python -m pytest`` against
``python -m bakery.testing.pytest_main`` on one test that imports torch and Triton,
alternated in one script; wall and CPU (user + system of the child) per run.

    .venv/bin/python bench/pytest_exit.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TEST = "import torch, triton\n\ndef test_imports():\n    assert torch.ones(1).item() == 1\n"


def once(module: str, tests: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", module, "-q", "-p", "no:cacheprovider", str(tests)],
        check=True,
        capture_output=True,
        cwd=tests,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return round(wall, 2), round(cpu, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {"pytest": [], "bakery.testing.pytest_main": []}
    with tempfile.TemporaryDirectory() as tmp:
        tests = Path(tmp)
        (tests / "test_exit.py").write_text(TEST)
        (tests / "pytest.ini").write_text("[pytest]\n")
        once("pytest", tests)  # byte code and page cache warm for both
        for _ in range(args.rounds):
            for module in runs:
                runs[module].append(once(module, tests))
    for module, got in runs.items():
        walls = sorted(w for w, _ in got)
        print(f"{module}: wall/CPU {got}; median wall {walls[len(walls) // 2]} s")


if __name__ == "__main__":
    main()
