"""Where one CPU verify's time goes (issue 27): the fixed costs of its processes.

CPU seconds (user + system, children included) of: a bare Python start, the imports
every pytest process and rank pays (pytest, NumPy, torch, Triton), and starting a rank
pool of world 2 and 4 under Triton's interpreter (spawn, imports, gloo join). The
per-test part (kernel launches through the interpreter, tensor set-up) comes from
pytest's ``--durations=0`` of a verify run (bench/bench.py's verify section).

    .venv/bin/python bench/verify_profile.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

PY = sys.executable

POOL = """
import os, resource, time
os.environ["TRITON_INTERPRET"] = "1"
from bakery.testing.dist import RankPool
t = time.perf_counter()
with RankPool({world}) as pool:
    pool.wait_ready()
    ready = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(ready, ru.ru_utime + ru.ru_stime)
"""


def cpu_of(code: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([PY, "-c", code], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return round(cpu, 2), round(time.perf_counter() - start, 2)


def main() -> int:
    rows = {}
    for label, code in (
        ("python start", "pass"),
        ("import pytest", "import pytest"),
        ("import numpy", "import numpy"),
        ("import torch", "import torch"),
        ("import triton", "import triton"),
        ("import pytest, numpy, torch, triton", "import pytest, numpy, torch, triton"),
        ("rank pool world 2 (spawn + imports + gloo join)", POOL.format(world=2)),
        ("rank pool world 4 (spawn + imports + gloo join)", POOL.format(world=4)),
    ):
        rows[label] = min((cpu_of(code) for _ in range(3)), key=lambda r: r[0])
    print(json.dumps({"load": os.getloadavg()[0], "cpu_s, wall_s": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
