"""Mutation testing of a series' bundled tests: ``make mutants``.

    python -m bakery.verifying.mutants SERIES --tree BAKED_TREE [--only NAME...]

A series lists hand-made mutants of one baked file in ``mutants.toml`` (``file``, then
``[[mutant]]`` with ``name``, ``old``, ``new``, optionally ``survives``: why no CPU
test can kill it, and ``killed_by``: the test meant to kill it, fnmatch on the first
failing test's id; a kill by another test is reported as such). Each mutant that
applies (its ``old`` text is in the tree's file exactly once) is written into a
scratch tree (the baked tree hard-linked beside it, the mutated file written anew: the
bake is never touched), and the bundled tests run on it under the interpreter,
stopping at the first failure. Killed: a test failed (named). Survived: every test
passed; with ``survives`` that is the known reason, without it a gap in the tests.
Hand-made, not a mutation library: the mutants are few, chosen for the promises the
tests state, and a generic tool would mutate vLLM's whole file.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bakery.errors import BakeryError
from bakery.verifying import plan as plans
from bakery.verifying.plan import VerifyPlan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass(frozen=True)
class Mutant:
    name: str
    old: str
    new: str
    survives: str | None = None
    killed_by: str | None = None


@dataclass(frozen=True)
class Outcome:
    mutant: Mutant
    state: str  # killed | survived | not-applicable
    detail: str = ""


def load(series_dir: Path) -> tuple[str, list[Mutant]]:
    path = series_dir / "mutants.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise BakeryError(f"{path}: {e}") from None
    mutants = [
        Mutant(m["name"], m["old"], m["new"], m.get("survives"), m.get("killed_by"))
        for m in data.get("mutant", [])
    ]
    return str(data["file"]), mutants


def _scratch_tree(tree: Path, rel: str, text: str, root: Path) -> Path:
    """The baked tree's ``vllm/`` hard-linked (copied across file systems) under ``root``,
    its manifest, and the mutated file written anew (never through a link)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(tree / "vllm", root / "vllm", copy_function=link, ignore=_NO_CACHES)
    target = root / rel
    target.unlink()
    target.write_text(text)
    manifest = tree / ".bakery" / "manifest.json"
    if manifest.is_file():
        (root / ".bakery").mkdir(exist_ok=True)
        shutil.copy2(manifest, root / ".bakery" / "manifest.json")
    return root


_NO_CACHES = shutil.ignore_patterns("__pycache__")


def _first_failure(junit: Path) -> str:
    import xml.etree.ElementTree as ET

    try:
        for case in ET.parse(junit).iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                return f"{case.get('classname')}::{case.get('name')}"
    except (OSError, ET.ParseError):
        pass
    return "a test failed"


def plan_for(series_dir: Path, tree: Path, jobs: int) -> VerifyPlan:
    """The plan of the mutants' runs, made once on the baked tree (its test environment
    is the series' own): each mutant's run is this plan on its scratch tree."""
    from bakery.patch.series import load_series

    options = plans.VerifyOptions(
        interpret=True,
        pytest_args=("-q", "-x"),
        jobs=jobs,
        reuse=plans.Reuse.OFF,  # a kill is a run, never a record
    )
    series = load_series(str(series_dir), series_dir.parent.parent)
    return plans.for_series(series, tree, options)


def run_one(baked: VerifyPlan, rel: str, mutant: Mutant) -> Outcome:
    from bakery.verifying.runner import run_verify

    tree = baked.tree
    text = (tree / rel).read_text()
    if text.count(mutant.old) != 1:
        return Outcome(mutant, "not-applicable", f"{mutant.old!r} is not in this release's file")
    # Beside the tree: same file system, so the scratch copy is hard links.
    with tempfile.TemporaryDirectory(prefix=f".mutant-{mutant.name}-", dir=tree.parent) as tmp:
        scratch = _scratch_tree(tree, rel, text.replace(mutant.old, mutant.new), Path(tmp) / "t")
        junit = Path(tmp) / "junit.xml"
        plan = dataclasses.replace(baked, tree=scratch, junit=junit, log=Path(tmp) / "log.txt")
        result = run_verify(plan)
        if result.exit_code != 0:
            first = _first_failure(junit)
            if mutant.killed_by and not fnmatch.fnmatchcase(first, mutant.killed_by):
                first += f" (listed killer: {mutant.killed_by})"
            return Outcome(mutant, "killed", first)
    return Outcome(mutant, "survived", mutant.survives or "NO TEST CAUGHT IT")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a series' mutants against its tests.")
    parser.add_argument("series", type=Path, help="the series folder (launcher/NAME)")
    parser.add_argument("--tree", type=Path, required=True, help="a baked tree of the series")
    parser.add_argument("--only", nargs="*", help="mutant names to run")
    parser.add_argument("--jobs", type=int, default=1, help="pytest-xdist workers per run")
    parser.add_argument("--json", type=Path, help="also write the outcomes as JSON")
    args = parser.parse_args(argv)
    rel, mutants = load(args.series)
    outcomes = []
    baked = plan_for(args.series.resolve(), args.tree.resolve(), args.jobs)
    for mutant in mutants:
        if args.only and mutant.name not in args.only:
            continue
        outcome = run_one(baked, rel, mutant)
        outcomes.append(outcome)
        print(f"{outcome.state:15} {mutant.name}: {outcome.detail}", flush=True)
    ran = [o for o in outcomes if o.state != "not-applicable"]
    killed = sum(o.state == "killed" for o in ran)
    print(f"kill rate: {killed} of {len(ran)} applicable mutants ({args.tree})")
    for o in ran:
        if o.state == "survived":
            print(f"  survivor {o.mutant.name}: {o.detail}")
    if args.json:
        args.json.write_text(
            json.dumps(
                [{"name": o.mutant.name, "state": o.state, "detail": o.detail} for o in outcomes],
                indent=2,
            )
            + "\n"
        )
    unexplained = [o for o in ran if o.state == "survived" and o.mutant.survives is None]
    return 1 if unexplained else 0


if __name__ == "__main__":
    raise SystemExit(main())
