"""``make mutate``: mutation testing of bakery's own lifecycle modules with mutmut (issue 50).

bakery's suite once caught 15 of 35 planted bugs; a mutation run says, per module, which
changes to the code no test notices. Each module of ``bench/mutate.toml`` runs on its own,
in a copy of the project under ``build/mutate/<name>`` (mutmut writes its ``mutants/``
folder there, never into the working tree that other work shares), against only the test
files that cover it (``-x``: a mutant is killed at its first failing test), one mutant at a
time. A module with more mutants than its ``sample`` runs a fixed random sample (seeded by
the module's name, so a rerun checks the same mutants and before/after figures compare).

mutmut, not cosmic-ray: mutmut 3 forks one pytest process per mutant and runs only the
tests that called the mutated function (cosmic-ray starts a fresh pytest per mutant: on a
shared 2-core machine that is the difference between minutes and an hour per module).
``PYTHONPATH`` points at the mutated copy, so a child process (``bakery verify``'s pytest)
runs the mutant too; but mutmut learns which tests reach a function in its own process
only, so a function that only a child runs counts as reached by no test ("no tests").

A run stops at ``--budget`` seconds (default 900, per module); mutmut checks the mutants
whose tests are fastest first, so a stopped run's figures lean to the fast tests: the
report says how many of the sample were checked.

A survivor that no test can kill (the mutant behaves as the code does: an equivalent
mutant) is named with its reason in ``bench/mutate-equivalent.toml``; the report lists it
under "equivalent" with that reason, and every other survivor under "unexplained".

Usage: ``python bench/mutate.py [NAME ...] [--sample N] [--all] [--budget S]
[--survivors-of SUMMARY]``; writes ``build/mutate/<name>/report.md`` (kill rate, every
survivor's diff) and ``build/mutate/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from mutmut.stats import status_by_exit_code

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "bench" / "mutate.toml"
EQUIVALENT = ROOT / "bench" / "mutate-equivalent.toml"
OUT = Path(os.environ.get("MUTATE_OUT") or ROOT / "build" / "mutate")
IGNORE = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.egg-info")


def _copy(work: Path, also: list[str]) -> None:
    """The project as mutmut needs it: src, tests, pyproject (no [tool.mutmut] in it, so
    mutmut reads the setup.cfg written here), and the folders a module's tests read."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ["src", "tests", "launcher", "patches", *also]:
        shutil.copytree(ROOT / name, work / name, ignore=IGNORE, symlinks=True)
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")


def _setup_cfg(
    module: str, tests: list[str], also: list[str], timeout: int, isolation: str = "fork"
) -> str:
    lines = "\n    ".join
    return (
        "[mutmut]\n"
        # the whole package is copied to mutants/src (what the tests import), one module mutated
        "source_paths = src\n"
        f"only_mutate = {module}\n"
        f"also_copy =\n    {lines(['launcher', 'patches', *also])}\n"
        f"pytest_add_cli_args_test_selection =\n    {lines(tests)}\n"
        "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -p\n    no:xdist\n"
        f"    --timeout={timeout}\n"
        "use_git_change_detection = false\n"
        # forkserver: where the tests leave a child of mutmut's own process (a verify's
        # pytest), the fork runner's os.wait() reaps it and stops on a pid it never started
        f"process_isolation = {isolation}\n"
        "use_setproctitle = false\n"
    )


#: In a child process (verify's pytest), mutmut's stats and self-check modes find no
#: config (the child's folder is a tree, not the work folder): the child runs the original
#: code then, and the mutant when one is under test.
SITE = """import os
if os.environ.get("MUTANT_UNDER_TEST") in ("stats", "fail", "mutant_generation"):
    os.environ["MUTANT_UNDER_TEST"] = ""
"""


def _mutmut(work: Path, log: IO[str] | None, *args: str) -> subprocess.Popen[str]:
    site = work / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE)
    path = os.pathsep.join([str(work / "mutants" / "src"), str(site)])
    env = {**os.environ, "PYTHONPATH": path}
    for name in ("PYTEST_ADDOPTS", "MUTANT_UNDER_TEST"):
        env.pop(name, None)
    # not `python -m mutmut`: the mutants import mutmut.__main__, a second copy of the module
    # that python -m ran as __main__ (and its set_start_method fails the second time)
    cmd = [sys.executable, "-c", "from mutmut.__main__ import cli; cli()", *args]
    out = log if log is not None else subprocess.PIPE
    return subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        text=True,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _run(work: Path, chosen: list[str], budget: float) -> None:
    """mutmut on the chosen mutants, stopped after budget seconds: what it checked by
    then is the result (its .meta file is written after each mutant)."""
    log = (work / "mutmut.log").open("w")
    proc = _mutmut(work, log, "run", "--max-children", "1", *chosen)
    try:
        proc.wait(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    log.close()


def _generate(work: Path, module: str) -> list[str]:
    """Every mutant's name: mutmut's own generation step, without a test run."""
    code = (
        "import os; os.makedirs('mutants', exist_ok=True)\n"
        "import mutmut.__main__ as m\n"
        "m.copy_src_dir(); m.copy_also_copy_files(); m.create_mutants(1)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=work, check=True, capture_output=True)
    meta = json.loads((work / "mutants" / f"{module}.meta").read_text())
    return sorted(meta["exit_code_by_key"])


def _results(work: Path, module: str) -> dict[str, int | None]:
    meta = json.loads((work / "mutants" / f"{module}.meta").read_text())
    codes: dict[str, int | None] = meta["exit_code_by_key"]
    return codes


def _equivalent(name: str) -> dict[str, str]:
    """The survivors of module ``name`` named equivalent, each with its reason."""
    if not EQUIVALENT.is_file():
        return {}
    table = tomllib.loads(EQUIVALENT.read_text()).get(name, {})
    return {str(k): str(v) for k, v in table.items()}


def run_one(
    name: str,
    spec: dict[str, object],
    sample: int | None,
    budget: float,
    only: list[str] | None = None,
    report_only: bool = False,
) -> dict[str, object]:
    module = str(spec["module"])
    tests = [str(t) for t in spec["tests"]]  # type: ignore[attr-defined]
    also = [str(a) for a in spec.get("also", [])]  # type: ignore[attr-defined]
    timeout = int(spec.get("timeout", 300))  # type: ignore[call-overload]
    work = OUT / name
    if report_only:
        names = sorted(_results(work, module))
    else:
        _copy(work, also)
        isolation = str(spec.get("isolation", "fork"))
        (work / "setup.cfg").write_text(_setup_cfg(module, tests, also, timeout, isolation))
        names = _generate(work, module)
    limit = sample if sample is not None else spec.get("sample")
    chosen = names
    if isinstance(limit, int) and 0 < limit < len(names):
        chosen = sorted(random.Random(name).sample(names, limit))
    if only is not None:  # a rerun of named mutants (an earlier run's survivors)
        chosen = sorted(set(only) & set(names))
    start = time.monotonic()
    if not report_only:
        _run(work, chosen, budget)
    wall = time.monotonic() - start
    codes = _results(work, module)
    got = {n: codes.get(n) for n in chosen}
    status = {n: status_by_exit_code[c] for n, c in got.items()}
    # a timeout is a kill: the mutant made a test loop past its time
    killed = sorted(n for n, s in status.items() if s in ("killed", "timeout"))
    survived = sorted(n for n, s in status.items() if s == "survived")
    reasons = _equivalent(name)
    equivalent = [n for n in survived if n in reasons]
    unexplained = [n for n in survived if n not in reasons]
    no_tests = sorted(n for n, s in status.items() if s == "no tests")
    other = sorted(n for n in got if n not in {*killed, *survived, *no_tests})
    tested = len(killed) + len(survived)
    checked = tested + len(no_tests)
    row: dict[str, object] = {
        "module": module,
        "mutants": len(names),
        "sampled": len(chosen),
        "checked": checked,
        "killed": len(killed),
        "survived": survived,
        "equivalent": equivalent,
        "unexplained": unexplained,
        "no_tests": no_tests,
        "other": {n: status[n] for n in other},
        "kill_rate": round(len(killed) / tested, 3) if tested else None,
        "wall_s": round(wall, 1),
        "not_checked": len(other),
    }
    row["line"] = (
        f"{name}: {len(killed)}/{tested} killed ({row['kill_rate']}), {len(survived)} survived"
        f" ({len(equivalent)} equivalent, {len(unexplained)} unexplained),"
        f" {len(no_tests)} no tests, {checked}/{len(chosen)}/{len(names)} checked/sampled/all,"
        f" {wall:.0f} s -> {work / 'report.md'}"
    )
    report = [
        f"# {name}: {module}",
        f"{len(killed)}/{tested} killed; {checked} checked of {len(chosen)} sampled"
        f" ({len(names)} mutants),"
        f" {len(no_tests)} reached by no test, {wall:.0f} s;"
        f" survivors: {len(equivalent)} equivalent, {len(unexplained)} unexplained",
        "",
    ]
    if equivalent:
        report += ["## Equivalent survivors", ""]
        report += [f"- `{n}`: {reasons[n]}" for n in equivalent] + [""]
    for n in unexplained + no_tests:
        shown, _ = _mutmut(work, None, "show", n).communicate()
        why = "survived, unexplained" if n in unexplained else "no tests"
        report += [f"## {n} ({why})", "```diff"]
        report += [shown.strip(), "```", ""]
    (work / "report.md").write_text("\n".join(report))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="modules of bench/mutate.toml (all if none)")
    ap.add_argument("--sample", type=int, help="check at most N mutants of each module")
    ap.add_argument("--all", action="store_true", help="every mutant, whatever the sample")
    ap.add_argument("--budget", type=float, default=900, help="seconds per module (900)")
    ap.add_argument(
        "--survivors-of", type=Path, help="rerun only the survivors named in this summary.json"
    )
    ap.add_argument("--report-only", action="store_true", help="report the last run again")
    args = ap.parse_args()
    modules: dict[str, dict[str, object]] = tomllib.loads(CONFIG.read_text())["module"]
    names = args.names or list(modules)
    unknown = [n for n in names if n not in modules]
    if unknown:
        ap.error(f"not in {CONFIG.name}: {', '.join(unknown)}")
    summary_path = OUT / "summary.json"
    OUT.mkdir(parents=True, exist_ok=True)
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for name in names:
        only = None
        if args.survivors_of:
            before = json.loads(args.survivors_of.read_text())[name]
            only = [*before["survived"], *before["no_tests"]]
        sample = 0 if args.all else args.sample
        row = run_one(name, modules[name], sample, args.budget, only, args.report_only)
        summary[name] = row
        summary_path.write_text(json.dumps(summary, indent=2) + "\n")
        print(row["line"], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
