"""``bakery verify --nnodes N``: a verify plan run across several hosts
(:mod:`bakery.testing.nodes` holds the protocol).

On the head (node 0) the plan runs as on one host, its pytest process reaching the
workers' ranks through this process (:class:`~bakery.testing.nodes.Head`); on a worker
nothing runs pytest: it serves ranks until the head's verdict, and returns that verdict
as its own result. A multi-node run is neither looked up in nor recorded to the reuse
cache (its key names one host's device), and runs in one pytest process (the ranks'
pools live there). Nothing here prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from bakery.errors import BakeryError, VerifyError
from bakery.testing import nodes, nodeserver
from bakery.verifying.plan import Reuse, VerifyPlan
from bakery.verifying.runner import VerifyResult, run_verify, verify_environment

_log = logging.getLogger(__name__)

#: The result's fields a worker takes from the head's verdict.
VERDICT_FIELDS = (
    "exit_code",
    "pytest_exit_code",
    "passed",
    "failed",
    "errors",
    "skipped",
    "xfailed",
    "xpassed",
    "known_defects",
    "unexpected_skips",
    "expectations",
    "elapsed",
)


def verify_on_nodes(
    plan: VerifyPlan, where: nodes.Layout, *, require_transport: str | None = None
) -> VerifyResult:
    """Run ``plan`` as node ``where.node_rank`` of ``where.nnodes``: the head's result,
    on every node. One line (VerifyError) for a node that differs, never joins, or is
    lost, and for a transport other than ``require_transport``."""
    key = nodes.token()
    plan = dataclasses.replace(plan, jobs=1, reuse=Reuse.OFF, cache_root=None)
    prints = nodes.fingerprints(plan.tree, plan.tests, plan.series_dir)
    roots = {"tests": str(plan.tests), "tree": str(plan.tree)}
    if plan.series_dir is not None:
        roots["series"] = str(plan.series_dir)
    if not where.head:
        verdict = nodeserver.run_worker(
            where,
            key,
            prints,
            roots,
            python=plan.env.python,
            env=verify_environment(plan),
            gpus=_gpus(plan.interpret),
        )
        return _result(verdict, plan)
    head = nodes.Head(where, key, prints, roots)
    try:
        head.gather()
        _log.info(
            f"every node joined: {', '.join(head.summary())}; same tree, tests and bakery",
            extra={"event": "nodes"},
        )
        with _environ(head.relay()):
            try:
                result = run_verify(plan)
            except VerifyError:
                if head.lost:
                    raise VerifyError(head.lost) from None
                raise
        head.child_done()  # the transports its ranks reported, all read
        if head.lost:
            raise VerifyError(head.lost)
        from bakery.testing import transport

        why = transport.unmet(require_transport, head.transports, interpret=plan.interpret)
        if why:
            raise VerifyError(why)
        head.finish({name: getattr(result, name) for name in VERDICT_FIELDS})
    except BakeryError as e:
        head.finish({"error": f"the head stopped: {e}", "exit_code": e.exit_code})
        raise
    finally:
        head.close()
    return result


def _result(verdict: Mapping[str, Any], plan: VerifyPlan) -> VerifyResult:
    fields = {name: verdict[name] for name in VERDICT_FIELDS if name in verdict}
    if "exit_code" not in fields or "pytest_exit_code" not in fields:
        raise VerifyError(f"the head sent no verdict ({sorted(verdict)[:5]})")
    return VerifyResult(**fields, jobs=1, env=plan.env.name)


def _gpus(interpret: bool) -> int:
    if interpret:
        return 0
    from bakery.testing import gpus

    return len(gpus.visible().names)


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while the run starts its pytest
    process (the runner gives that process this environment), then as before."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
