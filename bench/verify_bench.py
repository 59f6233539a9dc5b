"""The verify section of ``make bench`` (issue 27): CPU seconds and wall of
``bakery verify dcp2 --interpret`` with the code at a git rev (the baseline) and today's,
in one script, on 0.30.0 and 0.34.0; then the result-reuse rows.

CPU seconds are user + system of the whole process tree (pytest, its xdist workers and
every rank process: ``RUSAGE_CHILDREN`` of this script around each run); on a shared
machine they move far less than the wall. Standalone::

    .venv/bin/python bench/verify_bench.py --baseline-rev main [--releases 0.30.0,0.34.0]
        [--rounds N] [--reuse-rows] [--json build/bench/verify.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
SERIES = "dcp2"
KERNEL = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
TEST_FILE = ROOT / "launcher" / SERIES / "tests" / "test_candidate_blocks.py"


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def source_of(rev: str, work: Path) -> Path:
    """The ``src`` folder of the code at ``rev`` (``git archive`` of its src, launcher
    and patches: the baseline runs its own series tests, BAKERY_HOME its folder)."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    dest = work / f"rev-{commit[:12]}"
    if not (dest / "src" / "bakery").is_dir():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "src", "launcher", "patches"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "x", "-C", str(dest)], input=archive, check=True)
    return dest / "src"


def tree_of(release: str) -> Path:
    tree = ROOT / "build" / f"{SERIES}-{release}"
    if not (tree / "vllm").is_dir():
        subprocess.run(
            [PY, "-m", "bakery", "apply", SERIES, "--vllm", release, "--out", str(tree)],
            cwd=ROOT,
            env=_env(ROOT / "src"),
            check=True,
        )
    return tree


def _env(src: Path, cache: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{src}{os.pathsep}{ROOT}"
    env["BAKERY_HOME"] = str(src.parent if (src.parent / "launcher").is_dir() else ROOT)
    if cache is not None:
        env["BAKERY_CACHE_DIR"] = str(cache)
    return env


def _pristine(tree: Path) -> list[str]:
    """The pristine oracle's tree, from the cache the bake used: each run below has an
    empty cache of its own (no reuse), which holds no pristine release."""
    cache = os.environ.get("BAKERY_CACHE_DIR")
    if cache is None:
        import platformdirs

        cache = platformdirs.user_cache_dir("bakery")
    release = tree.name.removeprefix(f"{SERIES}-")
    pristine = Path(cache) / "trees" / f"vllm-{release}"
    return [f"--bakery-pristine={pristine}"] if (pristine / "vllm").is_dir() else []


def verify_once(
    src: Path, tree: Path, cache: Path, *extra: str, pytest_args: tuple[str, ...] = ("-q",)
) -> dict[str, Any]:
    """One ``bakery verify --interpret`` with the code in ``src``: cpu, wall, its verdict."""
    cmd = [PY, "-m", "bakery", "verify", SERIES, "--tree", str(tree), "--interpret", *extra]
    cmd += ["--", *pytest_args, *_pristine(tree)]
    cpu, start = _cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(src, cache), capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu
    verdict = next(
        (ln for ln in reversed(proc.stderr.splitlines()) if "verified" in ln), proc.stderr[-300:]
    )
    return {
        "cpu": round(cpu, 1),
        "wall": round(wall, 1),
        "exit": proc.returncode,
        "verdict": verdict,
    }


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median wall (of ``rounds`` runs), with every run's CPU and wall."""
    ordered = sorted(runs, key=lambda run: run["wall"])
    return {**ordered[(len(ordered) - 1) // 2], "runs": [[r["cpu"], r["wall"]] for r in runs]}


def before_after(rev: str, releases: list[str], work: Path, rounds: int = 1) -> dict[str, Any]:
    """The baseline's and today's verify, alternating ``rounds`` times, each with an
    empty bakery cache (so neither reuses a result; today's Triton cache is then cold
    too); with more than one round, the run of median wall of each."""
    old = source_of(rev, work)
    out: dict[str, Any] = {"rev": rev}
    for release in releases:
        tree = tree_of(release)
        base, today = [], []
        for _ in range(rounds):
            with (
                tempfile.TemporaryDirectory(dir=work) as a,
                tempfile.TemporaryDirectory(dir=work) as b,
            ):
                base.append(verify_once(old, tree, Path(a)))
                today.append(verify_once(ROOT / "src", tree, Path(b), "--no-reuse"))
        out[release] = (
            {"baseline": base[0], "today": today[0]}
            if rounds == 1
            else {"baseline": _median(base), "today": _median(today)}
        )
    return out


def reuse_rows(release: str, work: Path) -> dict[str, Any]:
    """First run, unchanged rerun, and a rerun after a one-byte change of the kernel, of
    a test file, and of the pytest arguments (each change undone after its row)."""
    tree = tree_of(release)
    src = ROOT / "src"
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(dir=work) as c:
        cache = Path(c)
        rows["first run"] = verify_once(src, tree, cache)
        rows["unchanged rerun"] = verify_once(src, tree, cache)
        for label, path in (("kernel", tree / KERNEL), ("test file", TEST_FILE)):
            before = path.read_bytes()
            try:
                path.write_bytes(before + b"\n")
                rows[f"one-byte change of the {label}"] = verify_once(src, tree, cache)
            finally:
                path.write_bytes(before)
        rows["other pytest arguments (-q -rs)"] = verify_once(
            src, tree, cache, pytest_args=("-q", "-rs")
        )
        rows["unchanged rerun, again"] = verify_once(src, tree, cache)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", default="main")
    ap.add_argument("--releases", default="0.30.0,0.34.0")
    ap.add_argument("--reuse-rows", action="store_true", help="also the result-reuse rows")
    ap.add_argument("--rounds", type=int, default=1, help="baseline and today alternated N times")
    ap.add_argument("--no-before-after", action="store_true")
    ap.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "verify.json")
    args = ap.parse_args(argv)
    work = ROOT / "build" / "bench"
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"load_start": os.getloadavg()[0]}
    if not args.no_before_after:
        res["before_after"] = before_after(
            args.baseline_rev, args.releases.split(","), work, args.rounds
        )
        print(json.dumps(res["before_after"], indent=1), flush=True)
    if args.reuse_rows:
        res["reuse"] = reuse_rows(args.releases.split(",")[-1], work)
        print(json.dumps(res["reuse"], indent=1), flush=True)
    res["load_end"] = os.getloadavg()[0]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
