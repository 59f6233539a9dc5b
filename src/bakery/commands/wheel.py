"""``bakery wheel`` and ``bakery sdist``: a release baked into installable packages.

Both bake the series the normal way (``commands.apply.apply``, into the same baked tree
``bakery apply`` writes), then package that bake: the wheel from the release's upstream
wheel per platform (package/wheel.py), the sdist from its upstream source distribution
(package/sdist.py). The packages hold the baked tree's bytes, so ``bakery verify`` on the tree
tests what the wheel installs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from bakery.bake.staging import display_path
from bakery.commands import apply as bake_cmd
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.model import records
from bakery.model.report import BakeReport, Proof
from bakery.sources.resolve import is_version

_log = logging.getLogger(__name__)


@dataclass
class Packaged:
    """The bake, and the packages written from it ((platform or "sdist", path) each)."""

    report: BakeReport
    files: list[tuple[str, Path]] = field(default_factory=list)
    #: what the packages' metadata says of the tree (issue 45)
    proof: Proof | None = None


@dataclass(frozen=True)
class Publish:
    """The publish rule's inputs (issue 45): nothing unverified is published. A tree with
    no verdict recorded for its content is verified here (``interpret`` as ``bakery
    verify`` takes it: True the CPU, False a GPU, None a GPU when one is seen);
    ``unverified`` is the explicit way out, written into the package's metadata."""

    interpret: bool | None = None
    unverified: bool = False


class NotVerified(BakeryError):
    """The tree is not verified, and the package is not written (exit 1)."""

    exit_code = 1


def proven(ctx: Context, series_spec: str, tree: Path, publish: Publish) -> Proof:
    """The tree's proof, once it may be published: a recorded ``verified``; else verify
    runs (its reuse record makes a run seen before cheap) and must pass. ``--unverified``
    publishes whatever it is, saying so. Anything else: NotVerified, one line."""
    from bakery.commands import proof as proofs

    found = proofs.of_tree(ctx.cache.root, tree)
    if publish.unverified:
        if found.verified:
            return found
        return Proof("unverified", f"published with --unverified ({found.line()})")
    if found.state == "failed":
        raise NotVerified(
            f"{display_path(tree)}: {found.reason}; nothing is published from a tree whose "
            "tests failed (fix it, or pass --unverified)"
        )
    if found.verified:
        return found
    return _verify(ctx, series_spec, tree, publish)


def _verify(ctx: Context, series_spec: str, tree: Path, publish: Publish) -> Proof:
    """verify of the tree, as ``bakery verify SERIES --tree TREE`` runs it; its verdict
    recorded by the tree's content."""
    from bakery.commands import proof as proofs
    from bakery.patch.series import load_series
    from bakery.verifying import plan as plans
    from bakery.verifying.runner import run_verify

    shown = display_path(tree)
    series = load_series(series_spec, ctx.home)
    # -q (progress not logged): pytest's output goes to a log beside the tree, not the terminal
    quiet = not _log.isEnabledFor(logging.INFO)
    log = tree.with_name(tree.name + ".verify.log") if quiet else None
    try:
        plan = plans.for_series(
            series,
            tree,
            plans.VerifyOptions(interpret=publish.interpret, log=log),
            cache=ctx.cache,
        )
        _log.info(
            f"verifying {shown} before it is published {plan.device}", extra={"event": "verify"}
        )
        result = run_verify(plan)
    except BakeryError as e:
        raise NotVerified(
            f"{shown} is unverified and verify cannot run ({e.message}): nothing unverified "
            "is published (make verify run, or pass --unverified)"
        ) from None
    found = proofs.of_result(result, plan.device)  # the runner recorded it
    if found is None or not found.verified:
        why = found.reason if found is not None else "no test ran"
        raise NotVerified(
            f"{shown}: verify did not pass ({why}); nothing unverified is published "
            f"(`bakery verify {series.name} --tree {shown}` shows why; or pass --unverified)"
            + (f"; its output: {display_path(log)}" if log is not None else "")
        )
    return found


def platforms(choice: str | None) -> list[str]:
    """--platform: x86_64, aarch64, all, or None for this machine's."""
    from bakery.sources.wheels import PLATFORMS, default_platform

    if choice == "all":
        return list(PLATFORMS)
    if choice is None:
        here = default_platform()
        return [here] if here else list(PLATFORMS)
    if choice not in PLATFORMS:
        raise UsageError(f"--platform {choice}: expected {', '.join(PLATFORMS)} or all")
    return [choice]


def _bake(
    ctx: Context, series: str, vllm: str, tree: Path | None, force: bool
) -> tuple[BakeReport, Path | None]:
    if not is_version(vllm):
        raise UsageError(
            f"--vllm {vllm}: packages are baked from a release (X.Y.Z) on the package index"
        )
    report = bake_cmd.apply(ctx, series, bake_cmd.ApplyOptions(vllm=vllm, out=tree, force=force))
    if report.status != "baked" or report.out is None:
        return report, None
    return report, Path(report.out).absolute()


def wheel(
    ctx: Context,
    series: str,
    *,
    vllm: str,
    platform: str | None = None,
    out_dir: Path = Path("dist"),
    tree: Path | None = None,
    force: bool = False,
    publish: Publish = Publish(),
) -> Packaged:
    """Bake the series on release vllm and write its wheel for each platform, once the
    bake is verified (``publish``)."""
    wanted = platforms(platform)
    report, baked_tree = _bake(ctx, series, vllm, tree, force)
    if baked_tree is None:
        return Packaged(report)
    from bakery.package.baked import read_baked
    from bakery.package.wheel import CannotCarry, refuse_built

    try:
        refuse_built(read_baked(baked_tree))  # before a verify or any download
        proof = proven(ctx, series, baked_tree, publish)
        paths = wheels_from_tree(ctx, baked_tree, wanted, out_dir, proof)
    except CannotCarry as e:
        raise e.naming(series) from None
    report.proof = proof
    return Packaged(report, list(zip(wanted, paths, strict=True)), proof)


def wheels_from_tree(
    ctx: Context, tree: Path, wanted: list[str], out_dir: Path, proof: Proof | None = None
) -> list[Path]:
    """The wheels of a baked tree (a release's bake) for each platform in wanted; ``proof``,
    what the tree's metadata says of it (the caller decided it may be published)."""
    from bakery.package.baked import read_baked
    from bakery.package.wheel import refuse_built, write_wheel
    from bakery.sources.wheels import upstream_wheel

    baked = read_baked(tree)._replace(proof=records.plain(proof))
    refuse_built(baked)  # before any download
    written = []
    for plat in wanted:
        found, path = upstream_wheel(baked.vllm, plat, ctx.cache, ctx.progress)
        _log.info(f"Writing the {plat} wheel from {found.filename}", extra={"event": "write"})
        written.append(write_wheel(path, baked, out_dir, upstream_sha256=found.sha256))
    return written


def sdist(
    ctx: Context,
    series: str,
    *,
    vllm: str,
    out_dir: Path = Path("dist"),
    tree: Path | None = None,
    force: bool = False,
    publish: Publish = Publish(),
) -> Packaged:
    """Bake the series on release vllm and write its source distribution, once the bake
    is verified (``publish``)."""
    from bakery.package.baked import read_baked
    from bakery.package.sdist import write_sdist
    from bakery.sources.wheels import upstream_sdist

    report, baked_tree = _bake(ctx, series, vllm, tree, force)
    if baked_tree is None:
        return Packaged(report)
    proof = proven(ctx, series, baked_tree, publish)
    report.proof = proof
    baked = read_baked(baked_tree)._replace(proof=records.plain(proof))
    upstream = upstream_sdist(baked.vllm, ctx.cache, ctx.progress)
    _log.info(f"Writing the sdist from {upstream.name}", extra={"event": "write"})
    return Packaged(report, [("sdist", write_sdist(upstream, baked, out_dir))], proof)
