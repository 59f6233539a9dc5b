"""A tree's proof (issue 45), the one answer every command gives: ``apply``, ``check``,
``matrix``, ``summarize``, ``wheel`` and ``sdist`` ask here, and nowhere else.

A verify's verdict is kept in bakery's cache by the tree's content (the key and the store:
``bakery.verifying.verdict``; the runner writes it, whichever command ran the tests). A
tree's proof is that verdict where one is recorded for its content, else what the bake
knew (``unverified``, or ``stale``). A verdict is never written into the tree: the tree's
files are what it is about, and a tree baked again from the same inputs, into another
folder, or only planned in memory (``check``) has the same content and so the same proof.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bakery.model.report import Proof
from bakery.verifying import verdict
from bakery.verifying.verdict import digest, of_result, record, record_result

if TYPE_CHECKING:
    from bakery.bake.plan import Plan
    from bakery.sources.pristine import Pristine

__all__ = [
    "digest",
    "of_plan",
    "of_result",
    "of_tree",
    "record",
    "record_result",
    "recorded",
]


def recorded(cache_root: Path, tree: Path, content: str | None = None) -> Proof | None:
    """The verdict recorded for the tree's present content, or None."""
    if not verdict.any_recorded(cache_root):
        return None  # nothing was ever verified: no digest to pay for
    return verdict.recorded(cache_root, content or digest(tree))


def _settle(found: Proof | None, baked: Proof | None) -> Proof:
    """The one rule: a verdict on the content, else what the bake knew (``unverified`` or
    ``stale``), else ``unverified``."""
    if found is not None:
        return found
    if baked is not None and baked.state in ("unverified", "stale"):
        return baked
    return Proof("unverified", "no verify recorded for this content")


def of_tree(cache_root: Path, tree: Path, baked: Proof | None = None) -> Proof:
    """A tree on disk's proof; ``baked``: what its bake knew (default: its manifest's)."""
    if baked is None:
        from bakery.model import manifest as manifests

        m = manifests.read(tree)
        baked = m.proof if m is not None else None
    return _settle(recorded(cache_root, tree), baked)


def of_plan(cache_root: Path, pristine: Pristine, plan: Plan) -> Proof | None:
    """The proof of the tree a plan would bake (``check``), without writing it: the same
    answer ``of_tree`` gives for the tree ``apply`` writes. None for a plan that does not
    apply (it makes no tree)."""
    baked = plan.report.proof
    if baked is None:
        return None
    found = None
    if verdict.any_recorded(cache_root):
        content = _planned(pristine, plan)
        found = verdict.recorded(cache_root, content) if content is not None else None
    return _settle(found, baked)


def _planned(pristine: Pristine, plan: Plan) -> str | None:
    """The content key of the tree ``bake`` would write from ``pristine`` (its copy as
    ``bake.tree._populate`` lays it out); None for a git checkout that is not a cached
    repository (the bake copies only the files git lists: the plan cannot name them
    without git)."""
    report, ident = plan.report, plan.report.identity
    facts = verdict.bake_facts(
        report.version,
        ident.claims if ident is not None else None,
        ident.pristine if ident is not None else None,
        (d.name for d in report.diffs),
    )
    if pristine.package_dir is not None:
        return verdict.planned(pristine.package_dir, "vllm/", plan.writes, facts)
    if not pristine.repo and (pristine.tree / ".git").exists():
        return None
    return verdict.planned(pristine.tree, "", plan.writes, facts)
