"""``bakery verify --pristine``: do the series' tests test the series?

The bundled tests run twice: on the baked tree, and on the pristine tree of its release
(bakery's cached one, hard-linked into a scratch folder so that nothing is written into
the cache), under the bake's release's rules (``--bakery-rules``). Each test that ran on
both is then one of:

- ``series``: only the baked tree passes it (it tests what the series brings);
- ``upstream``: both pass it (it tests upstream's behaviour, which the series keeps);
- ``regression``: only the pristine tree passes it (the series breaks it).

A series none of whose tests passes only on the baked tree is told that its tests do
not test it. Outcomes come from the two runs' JUnit files (pytest's own record).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from bakery.errors import VerifyError
from bakery.testing import expect
from bakery.testing.loader import ROOT_PACKAGE
from bakery.verifying.plan import Reuse, VerifyPlan
from bakery.verifying.runner import VerifyResult, run_verify


@dataclass
class PristineSplit:
    """The tests by which trees pass them (node ids as JUnit names them)."""

    release: str
    series: list[str] = field(default_factory=list)
    upstream: list[str] = field(default_factory=list)
    regression: list[str] = field(default_factory=list)
    #: passed by neither (failed, skipped or known defects on both)
    neither: int = 0

    @property
    def tests_the_series(self) -> bool:
        return bool(self.series)

    def lines(self) -> list[str]:
        out = [
            f"pristine vLLM {self.release}: {len(self.series)} pass only on the baked tree "
            f"(they test the series), {len(self.upstream)} pass on both (upstream's "
            f"behaviour), {len(self.regression)} pass only on the pristine tree "
            f"(regressions the series brings), {self.neither} pass on neither"
        ]
        out += [f"  regression: {name}" for name in self.regression]
        if not self.series:
            out.append(
                "no test passes only on the baked tree: the series' tests do not test the series"
            )
        return out


def outcomes(junit: Path) -> dict[str, str]:
    """Test id -> passed | failed | skipped, from a JUnit file."""
    result: dict[str, str] = {}
    try:
        cases = ET.parse(junit).iter("testcase")
    except (OSError, ET.ParseError) as e:
        raise VerifyError(f"cannot read the JUnit report {junit}: {e}") from None
    for case in cases:
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            result[name] = "failed"
        elif case.find("skipped") is not None:
            result[name] = "skipped"
        else:
            result[name] = "passed"
    return result


def split(baked: dict[str, str], pristine: dict[str, str], release: str) -> PristineSplit:
    out = PristineSplit(release)
    for name in sorted(set(baked) | set(pristine)):
        on_baked = baked.get(name) == "passed"
        on_pristine = pristine.get(name) == "passed"
        if on_baked and on_pristine:
            out.upstream.append(name)
        elif on_baked:
            out.series.append(name)
        elif on_pristine:
            out.regression.append(name)
        else:
            out.neither += 1
    return out


def _scratch(pristine: Path, root: Path) -> Path:
    """The pristine ``vllm/`` hard-linked (copied across file systems) under ``root``."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(
        pristine / ROOT_PACKAGE,
        root / ROOT_PACKAGE,
        copy_function=link,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return root


def run_pristine(baked: VerifyPlan) -> tuple[VerifyResult, PristineSplit]:
    """Run the baked plan's tests on the pristine tree of its tree's release, in the same
    test environment, on the same device, with the same series data; split them against
    the baked run's JUnit file (``baked.junit``)."""
    release = expect.Bake.of(baked.tree).release
    if release is None:
        raise VerifyError(f"--pristine: {baked.tree} records no vLLM release")
    pristine = baked.pristine  # the plan looked in the cache
    if pristine is None:
        raise VerifyError(
            f"--pristine: bakery's cache holds no pristine tree of vLLM {release} "
            f"(`bakery apply` with --vllm {release} puts it there)"
        )
    if baked.junit is None:
        raise VerifyError("--pristine: the baked run kept no JUnit file to compare with")
    args = [
        a for a in baked.pytest_args if not a.startswith(("--bakery-rules", "--bakery-pristine"))
    ]
    with tempfile.TemporaryDirectory(prefix="bakery-pristine-") as tmp:
        scratch = _scratch(pristine, Path(tmp) / "tree")
        junit = Path(tmp) / "pristine.xml"
        plan = dataclasses.replace(
            baked,
            tree=scratch,
            pytest_args=(*args, f"--bakery-rules={release}", f"--bakery-pristine={scratch}"),
            pristine=scratch,
            junit=junit,
            log=None,
            reuse=Reuse.OFF,
            cache_root=None,
        )
        result = run_verify(plan)
        return result, split(outcomes(baked.junit), outcomes(junit), release)
