"""Next steps that can be pasted: each is a whole command line, with the series, the
``--vllm`` the user gave (or the release the report names), ``--no-port`` and ``--out``
where they were given, and the ``.failed`` path, quoted for a POSIX shell."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakery.model.report import BakeReport
    from bakery.porting.refresh import Refreshed


@dataclass
class Asked:
    """The options of the apply or check that ran, as the user gave them."""

    series: str
    vllm: str | None
    no_port: bool = False
    out: Path | None = None
    fuzz: int = 0
    no_merge: bool = False


def command(*words: str | Path | None) -> str:
    return " ".join(shlex.quote(str(w)) for w in words if w is not None)


def _vllm(report: BakeReport, asked: Asked) -> list[str]:
    spec = asked.vllm or report.version
    return ["--vllm", spec] if spec else []


def after_bake(report: BakeReport, asked: Asked) -> list[str]:
    """What to run after an apply or check that did not apply (nothing after one that did)."""
    if report.ok or not report.diffs:
        return []
    if report.failed_out:
        failed = report.failed_out
        return [
            f"resolve the conflicts in {failed} (`git -C {shlex.quote(failed)} status` "
            "lists them; `git mergetool` works there), then:",
            command("bakery", "refresh", asked.series, "--tree", failed),
            command("bakery", "apply", asked.series, *_vllm(report, asked)),
        ]
    extra: list[str] = []
    if asked.no_port:
        extra.append("--no-port")
    if asked.no_merge:
        extra.append("--no-merge")
    if asked.fuzz:
        extra += ["--fuzz", str(asked.fuzz)]
    if asked.out is not None:
        extra += ["--out", str(asked.out)]
    steps = [
        "write the attempt, with the conflicts to resolve, to a .failed tree:",
        command("bakery", "apply", asked.series, *_vllm(report, asked), *extra, "--keep-failed"),
    ]
    # another release than the series' base: port merges what it can and proves it
    if asked.vllm and not asked.no_port:
        steps += [
            "or let bakery port merge and prove a port to it:",
            command("bakery", "port", asked.series, "--vllm", asked.vllm),
        ]
    return steps


def after_port(series: str, failed_out: str | None) -> list[str]:
    """After a port that proved no proposal: resolve its best attempt, verify it, write it
    (the README's steps, with the attempt's path)."""
    if not failed_out:
        return []
    return [
        f"resolve the conflicts in {failed_out} (`git -C {shlex.quote(failed_out)} status` "
        "lists them), then:",
        command("bakery", "verify", series, "--tree", failed_out),
        command("bakery", "refresh", series, "--tree", failed_out),
    ]


def after_stale(series: str, vllm: str | None) -> list[str]:
    """After check --up-to-date found a port out of step: the command that carries the
    series' changes into it."""
    return [command("bakery", "port", series, "--update", *(["--vllm", vllm] if vllm else []))]


def after_refresh(done: Refreshed, series: str, tree: Path | None = None) -> list[str]:
    """Bake from what refresh wrote. No --force, even into the refreshed tree itself
    (build/<series>-<release>/): apply replaces a tree whose edits the diffs now hold
    (bake.tree._equals_plan), and refuses, saying why, one that holds more."""
    bake = ["bakery", "apply", series, "--vllm", done.release]
    if done.port:
        return [command(*bake)]
    return [command(*bake), command("bakery", "check", series, "--up-to-date")]
