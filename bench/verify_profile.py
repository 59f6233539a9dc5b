"""Where one verify's time goes (issue 27): the fixed costs of its processes.

CPU seconds (user + system, children included) of: a bare Python start, the imports
every pytest process and rank pays (pytest, NumPy, torch, Triton), and starting a rank
pool of world 2 and 4 under Triton's interpreter (spawn, imports, gloo join). The
per-test part (kernel launches through the interpreter, tensor set-up) comes from
pytest's ``--durations=0`` of a verify run (bench/bench.py's verify section).

    .venv/bin/python bench/verify_profile.py          # CPU: ranks under the interpreter
    python3 bench/verify_profile.py --gpu               # the GPU host: CUDA ranks, CUDA start
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
if {interpret}:
    os.environ["TRITON_INTERPRET"] = "1"
from bakery.testing.dist import RankPool, stop_rank_server
t = time.perf_counter()
with RankPool({world}) as pool:
    pool.wait_ready()
    ready = time.perf_counter() - t
stop_rank_server()
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(ready, ru.ru_utime + ru.ru_stime)
"""


CUDA = "import torch; torch.cuda.{call}"


def cpu_of(code: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([PY, "-c", code], check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return round(cpu, 2), round(time.perf_counter() - start, 2)


def main() -> int:
    gpu = "--gpu" in sys.argv[1:]
    cases = [
        ("python start", "pass"),
        ("import pytest", "import pytest"),
        ("import numpy", "import numpy"),
        ("import torch", "import torch"),
        ("import triton", "import triton"),
        ("import pytest, numpy, torch, triton", "import pytest, numpy, torch, triton"),
        ("import bakery.cli (bakery's start)", "import bakery.cli"),
    ]
    if gpu:
        cases += [
            ("import torch; torch.cuda.is_available()", CUDA.format(call="is_available()")),
            ("import torch; torch.cuda.get_device_name(0)", CUDA.format(call="get_device_name(0)")),
            ("import torch; a CUDA tensor (context)", "import torch; torch.ones(1, device='cuda')"),
        ]
    for world in (2, 4):
        how = "CUDA ranks, gloo" if gpu else "gloo"
        cases.append(
            (
                f"rank pool world {world} (start, imports, {how} join)",
                POOL.format(world=world, interpret=not gpu),
            )
        )
    rows = {}
    for label, code in cases:
        rows[label] = min((cpu_of(code) for _ in range(3)), key=lambda r: r[0])
    print(json.dumps({"load": os.getloadavg()[0], "cpu_s, wall_s": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
