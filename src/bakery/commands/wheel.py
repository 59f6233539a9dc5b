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

from bakery.commands import apply as bake_cmd
from bakery.context import Context
from bakery.errors import UsageError
from bakery.model.report import BakeReport
from bakery.sources.resolve import is_version

_log = logging.getLogger(__name__)


@dataclass
class Packaged:
    """The bake, and the packages written from it ((platform or "sdist", path) each)."""

    report: BakeReport
    files: list[tuple[str, Path]] = field(default_factory=list)


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
) -> Packaged:
    """Bake the series on release vllm and write its wheel for each platform."""
    wanted = platforms(platform)
    report, baked_tree = _bake(ctx, series, vllm, tree, force)
    if baked_tree is None:
        return Packaged(report)
    from bakery.package.wheel import CannotCarry

    try:
        paths = wheels_from_tree(ctx, baked_tree, wanted, out_dir)
    except CannotCarry as e:
        raise e.naming(series) from None
    return Packaged(report, list(zip(wanted, paths, strict=True)))


def wheels_from_tree(ctx: Context, tree: Path, wanted: list[str], out_dir: Path) -> list[Path]:
    """The wheels of a baked tree (a release's bake) for each platform in wanted."""
    from bakery.package.baked import read_baked
    from bakery.package.wheel import refuse_built, write_wheel
    from bakery.sources.wheels import upstream_wheel

    baked = read_baked(tree)
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
) -> Packaged:
    """Bake the series on release vllm and write its source distribution."""
    from bakery.package.baked import read_baked
    from bakery.package.sdist import write_sdist
    from bakery.sources.wheels import upstream_sdist

    report, baked_tree = _bake(ctx, series, vllm, tree, force)
    if baked_tree is None:
        return Packaged(report)
    baked = read_baked(baked_tree)
    upstream = upstream_sdist(baked.vllm, ctx.cache, ctx.progress)
    _log.info(f"Writing the sdist from {upstream.name}", extra={"event": "write"})
    return Packaged(report, [("sdist", write_sdist(upstream, baked, out_dir))])
