"""Start-up and warm bake of today's code against the code at a git revision, alternating
in one script (issue 44: the architecture round must keep both within spread).

    .venv/bin/python bench/ab_start.py --before DIR [--runs N]

DIR holds the earlier code's ``src/`` (``git worktree add DIR REV``). Each row alternates
before and today N times and reports the median wall time and the median CPU time of the
process and its children (``resource.getrusage(RUSAGE_CHILDREN)``), with the ratio.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True, help="a checkout of the earlier code")
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    py = sys.executable
    out = Path(tempfile.mkdtemp(prefix="ab-start-"))
    rows = {
        "bakery --version": ["-m", "bakery", "--version"],
        "bakery apply --help": ["-m", "bakery", "apply", "--help"],
        "bakery verify --help": ["-m", "bakery", "verify", "--help"],
        "warm bake (apply dcp2, cached 0.30.0)": [
            "-m",
            "bakery",
            "-q",
            "apply",
            "dcp2",
            "--vllm",
            "0.30.0",
            "--force",
            "--out",
        ],
    }
    print(
        f"{'row':40} {'before wall':>12} {'today wall':>11} {'ratio':>6} "
        f"{'before cpu':>11} {'today cpu':>10} {'ratio':>6}"
    )
    for name, argv in rows.items():
        got: dict[str, list[tuple[float, float]]] = {"before": [], "today": []}
        for _ in range(args.runs):
            for who in ("before", "today"):
                src = args.before / "src" if who == "before" else ROOT / "src"
                home = args.before if who == "before" else ROOT
                env = {**os.environ, "PYTHONPATH": str(src), "BAKERY_HOME": str(home)}
                cmd = [py, *argv]
                if cmd[-1] == "--out":
                    target = out / who
                    shutil.rmtree(target, ignore_errors=True)
                    cmd.append(str(target))
                got[who].append(timed(cmd, env))
        bw = statistics.median(w for w, _ in got["before"])
        tw = statistics.median(w for w, _ in got["today"])
        bc = statistics.median(c for _, c in got["before"])
        tc = statistics.median(c for _, c in got["today"])
        print(
            f"{name:40} {bw:11.3f}s {tw:10.3f}s {tw / bw:6.2f} "
            f"{bc:10.3f}s {tc:9.3f}s {tc / bc:6.2f}"
        )
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
