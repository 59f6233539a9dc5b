"""`make ports-table`: the leave-one-out table of issue 13 (ports proposed, proven by verify).

For each release with a committed port, a scratch project holds the series and every
other port (the target's hidden); `bakery port --dry-run` runs there twice: with line
merges only (bakery before the syntax merge) and as it is now. For each target the table
gives the start chosen, hunks by kind of resolution, the verify result, and how the
proposal differs from the committed port: lines of the two diffs that differ, and whether
the difference matters, from the differential check run on both baked trees.

    python bench/port_table.py [--release 0.34.0 ...] [--out bench/ports.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERIES = "dcp2"


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bakery", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def _home(tmp: Path, hide: str) -> Path:
    home = tmp / f"home-{hide}"
    shutil.copytree(ROOT / "launcher", home / "launcher")
    shutil.copytree(ROOT / "patches", home / "patches", ignore=shutil.ignore_patterns(hide))
    return home


def _difference(proposed: Path, committed: Path) -> int:
    import difflib

    n = 0
    for p in sorted(committed.glob("*.diff")):
        a = p.read_text().splitlines()
        b = (proposed / p.name).read_text().splitlines() if (proposed / p.name).exists() else []
        n += sum(
            max(i2 - i1, j2 - j1)
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b).get_opcodes()
            if tag != "equal"
        )
    return n


def _matters(home: Path, release: str, proposed_port: Path, env: dict[str, str]) -> str:
    """The differential check between the committed port's tree and the proposal's."""
    sys.path.insert(0, str(ROOT / "src"))
    from bakery.porting import differential

    trees = {}
    for label, port in (
        ("committed", ROOT / "patches" / SERIES / release),
        ("proposed", proposed_port),
    ):
        dest = home / "patches" / SERIES / release
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(port, dest, ignore=shutil.ignore_patterns("PROVENANCE.md"))
        out = home / f"tree-{label}"
        res = _run(["apply", SERIES, "--vllm", release, "--out", str(out)], env, home)
        if res.returncode != 0:
            return f"{label} port does not bake"
        trees[label] = out
    shutil.rmtree(home / "patches" / SERIES / release)
    cases = home / "launcher" / SERIES / differential.CASES_FILE
    records = {}
    for label, tree in trees.items():
        records[label] = home / f"{label}.pt"
        differential.record(tree, cases, records[label], interpret=True)
    diffs = differential.compare(records["committed"], records["proposed"], {})
    if not diffs:
        return "no (same outputs on every recorded input)"
    return "yes: " + "; ".join(d.line() for d in diffs[:4])


def one(release: str, tmp: Path, syntax: bool) -> dict[str, object]:
    home = _home(tmp, release)
    env = {**os.environ, "BAKERY_HOME": str(home), "PYTHONPATH": str(ROOT / "src")}
    args = ["port", SERIES, "--vllm", release, "--dry-run", "--json", str(home / "port.json")]
    if not syntax:
        args.append("--lines-only")
    t0 = time.perf_counter()
    res = _run(args, env, home)
    seconds = time.perf_counter() - t0
    report = json.loads((home / "port.json").read_text())
    chosen = next((t for t in report["tried"] if t["accepted"]), None)
    row: dict[str, object] = {
        "release": release,
        "mode": "lines + syntax" if syntax else "lines only",
        "exit": res.returncode,
        "seconds": round(seconds, 1),
        "start": chosen["start"] if chosen else "-",
        "candidates": report["candidates"],
        "verify": chosen["verify"]
        if chosen
        else "; ".join(t["verify"] for t in report["tried"]) or "none ran",
    }
    if chosen:
        proposal = Path(home / "build" / "port" / f"{SERIES}-{release}")
        port_dirs = sorted(proposal.glob("candidate-*/port"))
        n = [t["start"] for t in report["tried"]].index(chosen["start"])
        committed = ROOT / "patches" / SERIES / release
        row["lines_from_committed"] = _difference(port_dirs[n], committed)
        row["difference_matters"] = _matters(home, release, port_dirs[n], env)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--release", nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "ports.md")
    args = ap.parse_args()
    releases = args.release or sorted(
        p.name for p in (ROOT / "patches" / SERIES).iterdir() if p.is_dir()
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bakery-ports-") as tmp:
        for release in releases:
            for syntax in (False, True):
                row = one(release, Path(tmp) / ("s" if syntax else "l"), syntax)
                print(json.dumps(row), flush=True)
                rows.append(row)
    lines = [
        "# Leave-one-out ports (`make ports-table`)",
        "",
        f"Each release's committed port hidden in turn; `bakery port {SERIES} --vllm X --dry-run`.",
        "",
        "| release | merge | start chosen | hunks of the best candidate | verify "
        "| lines from committed port | difference matters | s |",
        "|---|---|---|---|---|---:|---|---:|",
    ]
    for r in rows:
        best = r["candidates"][0] if r["candidates"] else {}  # type: ignore[index]
        hunks = ", ".join(f"{n} {k}" for k, n in sorted(best.get("hunks", {}).items()))  # type: ignore[union-attr]
        lines.append(
            f"| {r['release']} | {r['mode']} | {r['start']} | {best.get('start', '-')}: {hunks} | "  # type: ignore[union-attr]
            f"{r['verify']} | {r.get('lines_from_committed', '-')} | "
            f"{r.get('difference_matters', '-')} | {r['seconds']} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
