"""``bakery verify``: which tree and which series (in the open: ``--tree``, else the
series' last apply), where the tests run (CPU or GPU), and the run itself
(:mod:`bakery.verifying.runner`). Nothing here prints."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from bakery import project
from bakery.bake.staging import display_path
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.patch.series import load_series
from bakery.verifying import environments

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from bakery.testing.nodes import Layout
    from bakery.verifying.plan import VerifyOptions, VerifyPlan
    from bakery.verifying.runner import VerifyResult


def _default_series(home: Path, tree: Path | None) -> str:
    """verify's series when none is named: the one the tree was baked from, else the
    project's only series. Never the cache's record (SECURITY.md: the cache chooses
    nothing that runs)."""
    from bakery.model import manifest as manifests

    if tree is not None:
        manifest = manifests.read(tree)
        if manifest is not None:
            if manifest.series_path and Path(manifest.series_path).is_dir():
                return manifest.series_path
            if manifest.series_name:
                return manifest.series_name
        raise UsageError(f"--tree {tree}: not a baked tree (no manifest); name the series")
    launcher = home / "launcher"
    names = sorted(p.name for p in launcher.glob("*") if (p / "diffs").is_dir())
    if len(names) == 1:
        return names[0]
    raise UsageError(f"verify: name the series (the project has {len(names)}) or pass --tree")


def edited_files(tree: Path) -> list[str]:
    """Files the bake wrote whose content changed since (users verify fixes before they
    refresh a port); the tree's other files are the pristine release's."""
    import hashlib

    from bakery.model import manifest as manifests
    from bakery.safety import paths

    manifest = manifests.read(tree)
    files = manifest.files if manifest is not None else {}
    changed = []
    for rel, sha in sorted(files.items()):
        p = paths.inside(tree, rel, f"--tree {tree}: manifest")
        regular = p.is_file() and not p.is_symlink()
        now = hashlib.sha256(p.read_bytes()).hexdigest() if regular else None
        if now != sha:
            changed.append(rel)
    return changed


def verify(
    ctx: Context,
    series_spec: str | None,
    *,
    tree: Path | None,
    options: VerifyOptions,
    pristine: bool = False,
    nodes: Layout | None = None,
    require_transport: str | None = None,
) -> tuple[VerifyResult, list[str]]:
    """Run the series' bundled tests against a baked tree: (result, files edited since
    the bake). The tree: ``tree``, else the series' last ``bakery apply`` (never a
    matrix worker's); the ``bakery`` logger hears which tree, and where the tests run.
    ``options``: what the command line chose (the device, the test environment, pytest's
    arguments, the reuse policy), made into the plan every path makes
    (:func:`bakery.verifying.plan.for_series`)."""
    from bakery.errors import VerifyError
    from bakery.verifying import plan as plans
    from bakery.verifying.runner import run_verify

    if options.env is not None:
        environments.get(options.env)  # an unknown name is one line before anything else
    _check_nodes(nodes, require_transport, pristine)
    series = load_series(series_spec or _default_series(ctx.home, tree), ctx.home)
    if series.tests is None:
        raise VerifyError(f"series {series.name} has no tests/ folder")
    why = "--tree"
    if tree is None:
        tree, why = last_tree(ctx, series.name), f"the last `bakery apply {series.name}`"
        if tree is None:
            raise VerifyError(
                f"no baked tree for {series.name}: run `bakery apply "
                f"{series.name}` first, or pass --tree"
            )
        refuse_untrusted_default(ctx.home, tree, series.name)
    if not tree.is_dir():
        raise VerifyError(f"--tree {tree}: no such folder")
    edited = edited_files(tree)
    if pristine:
        options = dataclasses.replace(options, reuse=plans.Reuse.OFF)
    plan = plans.for_series(series, tree, options, cache=ctx.cache)
    _log.info(f"verifying {display_path(tree)} ({why}) {plan.device}", extra={"event": "verify"})
    if nodes is not None:  # across hosts: bakery.verifying.multinode
        from bakery.verifying.multinode import verify_on_nodes

        return verify_on_nodes(plan, nodes, require_transport=require_transport), edited
    if pristine:
        return _verify_both(plan), edited
    return run_verify(plan), edited  # it records the whole suite's verdict (issue 45)


def _check_nodes(nodes: Layout | None, require: str | None, pristine: bool) -> None:
    """The multi-node flags that go together, before anything runs (one line each)."""
    from bakery.testing import transport

    if require is not None and require not in transport.REQUIRE:
        raise UsageError(f"--require-transport {require!r}: use {' or '.join(transport.REQUIRE)}")
    if nodes is None:
        if require is not None:
            raise UsageError("--require-transport: only with --nnodes (NCCL between hosts)")
        return
    if pristine:
        raise UsageError("--pristine: on one host only (not with --nnodes)")
    from bakery.testing.nodes import token

    token()  # the shared secret, before anything else


def refuse_untrusted_default(home: Path, tree: Path, series: str) -> None:
    """The last-bake record lives in the cache, which is data (SECURITY.md): the tree it
    names is verified (its code run) only when it is one bakery made for this project and
    series: a baked tree of that series inside the project's ``build/`` (where the user
    edits and verifies fixes), or elsewhere one whose manifest names that series and
    whose files are all as the bake wrote them. Anything else: one line, exit 2."""
    from bakery.errors import VerifyError
    from bakery.model import manifest as manifests

    shown = f"the recorded last bake of {series} ({tree})"
    try:
        found = manifests.read(tree)
    except BakeryError:
        found = None
    if found is None or found.status != "baked" or found.series_name != series:
        raise VerifyError(f"{shown} is not a tree bakery baked for {series}; pass --tree")
    build = (home / "build").resolve()
    if tree.resolve().is_relative_to(build) and not any(
        p.is_symlink() for p in (tree, *tree.parents) if p.resolve().is_relative_to(build)
    ):
        return
    if not found.files or edited_files(tree):
        raise VerifyError(f"{shown} is outside {display_path(build)} and not as baked; pass --tree")


def _verify_both(plan: VerifyPlan) -> VerifyResult:
    """verify --pristine: the baked run, then the same plan on the pristine release,
    split (bakery.verifying.pristine). Exit 1 also when no test passes only on the
    baked tree."""
    import tempfile

    from bakery.verifying.pristine import run_pristine
    from bakery.verifying.runner import run_verify

    with tempfile.TemporaryDirectory(prefix="bakery-verify-") as tmp:
        baked = (
            plan
            if plan.junit is not None
            else dataclasses.replace(plan, junit=Path(tmp) / "baked.xml")
        )
        result = run_verify(baked)
        _log.info("the same tests on the pristine release (--pristine)", extra={"event": "verify"})
        _, split = run_pristine(baked)
    code = result.exit_code if split.tests_the_series else 1
    return dataclasses.replace(result, exit_code=code, pristine=tuple(split.lines()))


def last_applies(ctx: Context) -> dict[str, str]:
    """The project's series and their last applied trees (the record in the cache)."""
    return project.last_applies(ctx.cache.root / project.LAST_BAKES)


def last_tree(ctx: Context, series: str) -> Path | None:
    p = last_applies(ctx).get(series)
    return Path(p) if p and Path(p).is_dir() else None
