"""The wheel-writing step alone, as bench.py times it: a baked tree and an upstream wheel in,
the baked wheel out (what ``bakery wheel`` does after its bake and its download).

    python bench/wheel_step.py TREE UPSTREAM_WHEEL OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from bakery.bake.baked import read_baked
from bakery.bake.wheel import write_wheel

if __name__ == "__main__":
    tree, upstream, out = map(Path, sys.argv[1:4])
    print(write_wheel(upstream, read_baked(tree), out))
