# SPDX-License-Identifier: Apache-2.0
"""What the dcp2 tests need beyond bakery's generic plugin.

- The stand-ins for DeepSelect (a CUDA extension bakery does not build): the loader
  falls back to them where the tree's modules do not load lightly.
- ``DcpGroup``: what the DCP path asks of vLLM's group coordinator, built in each rank
  from the plain torch ProcessGroup that bakery's rank pool hands over.
- ``load_kernel()``: the baked tree's candidate-block module, loaded after the stand-ins
  are declared (test modules and rank processes alike import this module first).
- ``start_ttir_probe()``: ``ttir_probe.py`` in a process of its own, started when
  collection ends (conftest.py) so that its seconds of imports and compile overlap the
  other tests instead of adding to the run.
"""

import os
import subprocess
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from bakery.testing import StandIn, declare, load_tree_module

MODULE = "vllm.model_executor.kernels.attention.dsa.candidate_blocks"


def _sparse_mqa_logits(module: ModuleType) -> None:
    def has_deep_select() -> bool:
        return False

    module.has_deep_select = has_deep_select


def _indexer_topk(module: ModuleType) -> None:
    def deep_select_topk(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("DeepSelect is a CUDA extension that bakery does not build")

    def get_deep_select_stride_requirement() -> tuple[int, int]:
        return (16, 16)

    def is_deep_select_supported(*args: Any, **kwargs: Any) -> bool:
        return False

    module.deep_select_topk = deep_select_topk
    module.get_deep_select_stride_requirement = get_deep_select_stride_requirement
    module.is_deep_select_supported = is_deep_select_supported


STANDINS = (
    StandIn(
        "vllm.model_executor.kernels.attention.dsa.sparse_mqa_logits",
        "has_deep_select() is False: no DeepSelect extension",
        _sparse_mqa_logits,
        prefer_tree=True,
    ),
    StandIn(
        "vllm.model_executor.layers.indexer_topk",
        "DeepSelect is never supported: no CUDA extension",
        _indexer_topk,
        prefer_tree=True,
    ),
)


@dataclass
class DcpGroup:
    """What the DCP path asks of vLLM's group coordinator: ``world_size`` and
    ``device_group`` (a torch ProcessGroup); ``rank_in_group`` for convenience."""

    world_size: int
    rank_in_group: int
    device_group: Any


def dcp_group(ctx: Any) -> DcpGroup:
    """The DCP group of a rank task's context (bakery.testing.dist.RankContext)."""
    return DcpGroup(ctx.world_size, ctx.rank, ctx.group)


def start_ttir_probe(tree: str) -> "subprocess.Popen[str]":
    """``ttir_probe.py`` against ``tree``, running (TRITON_INTERPRET unset: it compiles)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["BAKERY_TREE"] = tree
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ttir_probe.py")
    return subprocess.Popen(
        [sys.executable, probe],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def load_kernel() -> ModuleType:
    declare(*STANDINS)
    return load_tree_module(MODULE)
