"""The wheel-writing step alone, as bench.py times it: a baked tree and an upstream wheel in,
the baked wheel out (what ``bakery wheel`` does after its bake and its download). Prints
the seconds the step took inside the process (reading the bake back and writing the
wheel): what a ``bakery wheel`` adds to its bake, whose process is already running.

    python bench/wheel_step.py TREE UPSTREAM_WHEEL OUT_DIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from bakery.package.baked import read_baked
from bakery.package.wheel import write_wheel

if __name__ == "__main__":
    tree, upstream, out = map(Path, sys.argv[1:4])
    start = time.perf_counter()
    write_wheel(upstream, read_baked(tree), out)
    print(f"{time.perf_counter() - start:.6f}")
