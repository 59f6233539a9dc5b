"""Issue 26: the time of ``bakery bisect`` over 32 upstream commits, on apply only and on
apply plus verify.

    python bench/bisect_time.py [--commits 32]

The upstream is a local git repository of real shapes built the way the tests build it
(tests/support/dsa.py ``dsa_history``: the DSA kernel file as vLLM 0.30.0 to 0.34.0 ship it,
made-up commits between and after them, filler commits after 0.30.0 to make up the
count), and the series is the real dcp2 diff with its real ports and one promise test
(tests/commands/test_bisect.py PROMISE). The tree is small (three files), so the figures
are bakery's own cost per step (resolve, identity, plan with merges, copy, verify's
pytest process), not a 150 MB vLLM tree's copy. Prints JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=32)
    args = ap.parse_args()
    from tests.support.dsa import cache_dsa_releases, dsa_history, dsa_series

    spec = importlib.util.spec_from_file_location(
        "promise", ROOT / "tests" / "commands" / "test_bisect.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    work = Path(tempfile.mkdtemp(prefix="bisect-bench-"))
    os.environ["BAKERY_HOME"] = str(work / "home")
    os.environ["BAKERY_CACHE_DIR"] = str(work / "cache")
    os.environ["BAKERY_INDEX_URL"] = "http://127.0.0.1:9/simple"  # nothing from the network
    os.chdir(work)
    base = len(dsa_history(work / "probe")) - 1  # commits after 0.30.0 without fillers
    dsa_history(work / "up", fillers=max(args.commits - base, 0))
    cache_dsa_releases()
    dsa_series(work / "home", tests=mod.PROMISE)
    from bakery.commands.bisect import bisect
    from bakery.context import Context

    out = {}
    for mode in ("apply", "verify"):
        t0 = time.perf_counter()
        r = bisect(
            Context.here(),
            "dsa",
            vllm=f"git+file://{work}/up",
            good="v0.30.0",
            bad="main",
            verify=mode == "verify",
            out_root=work / f"build-{mode}",
        )
        out[mode] = {
            "seconds": round(time.perf_counter() - t0, 2),
            "commits": r.commits,
            "bakes": len(r.steps),
            "culprit": r.culprit.subject if r.culprit else None,
        }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
