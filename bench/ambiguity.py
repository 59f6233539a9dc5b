"""Issue 19's measures, on real vLLM releases (fetched through bakery's cache).

    python bench/ambiguity.py corpus [--from 0.29.0 --to 0.30.0 --onto 0.28.0]
    python bench/ambiguity.py series [SERIES] [--releases 0.30.0 0.31.0 ...]

``corpus``: the real changes between two releases (every Python file that both have and
that differs, diffed with GNU diff -u, three lines of context) replayed onto an older
release with bakery's engine. Counts the hunks, their outcomes, the ``ambiguous`` ones
(applied, but their old text matches elsewhere too), and, for every hunk whose file
exists, how many have old text that matches in more than one place of the target file.

It also counts the hunks the placement check would warn about (``moved-def``), with the
``--from`` release as the base.

``series``: the series checked on each release, with its own diffs (``--no-port``) and
with the release's port where there is one: outcomes, ``ambiguous`` and ``moved-def``
hunks, and contract warnings, marking those the port resolved.

Prints JSON on stdout (a summary on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bakery.checks.guard import LANDED, _changed, _first, _names
from bakery.checks.pyindex import index
from bakery.patch.diffs import FilePatch
from bakery.patch.engine import (
    FileResult,
    Outcome,
    _Pattern,
    _Places,
    _trim,
    apply_file,
    split_lines,
)
from bakery.patch.parse import read_diff
from bakery.sources.cache import Cache
from bakery.sources.resolve import release


def _py_files(tree: Path) -> set[str]:
    out = set()
    for root, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for f in files:
            if f.endswith(".py"):
                out.add((Path(root) / f).relative_to(tree).as_posix())
    return out


def _gnu_diff(a: Path, b: Path, rel: str) -> bytes:
    proc = subprocess.run(
        ["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}", str(a), str(b)],
        capture_output=True,
        check=False,
    )
    if proc.returncode > 1:
        raise RuntimeError(proc.stderr.decode(errors="replace"))
    return proc.stdout


def corpus(old: str, new: str, onto: str, under: str = "") -> dict[str, object]:
    cache = Cache()
    trees = {v: release(v, cache) for v in (old, new, onto)}
    for p in trees.values():
        p.confirm()
    a, b, t = (trees[v].tree for v in (old, new, onto))
    both = sorted(r for r in _py_files(a) & _py_files(b) if r.startswith(under))
    counts: dict[str, int] = {}
    multi = 0  # hunks whose old text matches more than one place of the pristine target
    examples: list[dict[str, object]] = []
    hunks = files = moved = 0
    moved_examples: list[dict[str, object]] = []
    start = time.perf_counter()
    engine_s = 0.0
    for rel in both:
        da, db = (a / rel).read_bytes(), (b / rel).read_bytes()
        if da == db:
            continue
        text = _gnu_diff(a / rel, b / rel, rel)
        diff = read_diff(Path(f"{rel}.diff"), text)
        diff.resolve_paths(1, "")
        files += 1
        target = t / rel
        content = target.read_bytes() if target.is_file() else None
        for fp in diff.files:
            hunks += len(fp.hunks)
            t0 = time.perf_counter()
            res = apply_file(fp, content, 0)
            engine_s += time.perf_counter() - t0
            for r in res.hunks:
                counts[r.status.value] = counts.get(r.status.value, 0) + 1
                if r.status is Outcome.AMBIGUOUS and len(examples) < 10:
                    examples.append(
                        {
                            "file": rel,
                            "hunk": r.index,
                            "line": r.line,
                            "also_matches": r.also_matches,
                        }
                    )
            if content is None:
                continue
            moved += _moved_defs(fp, da, db, res, moved_examples)
            places = _Places(*split_lines(content))
            for h in fp.hunks:
                pat: _Pattern = _trim(h, 0)
                if len(places.others(pat, -1, 2)) > 1:
                    multi += 1
    return {
        "corpus": f"vLLM {old} -> {new} (.py files both have under {under or '.'!r}), "
        f"replayed onto {onto}",
        "files": files,
        "hunks": hunks,
        "outcomes": dict(sorted(counts.items())),
        "ambiguous": counts.get("ambiguous", 0),
        "ambiguous_share": round(counts.get("ambiguous", 0) / max(hunks, 1), 4),
        "old_text_in_more_than_one_place": multi,
        "old_text_in_more_than_one_place_share": round(multi / max(hunks, 1), 4),
        "moved_def": moved,
        "moved_def_examples": moved_examples,
        "engine_seconds": round(engine_s, 3),
        "seconds": round(time.perf_counter() - start, 1),
        "examples": examples,
    }


def _moved_defs(
    fp: FilePatch, base: bytes, after: bytes, res: FileResult, examples: list[dict[str, object]]
) -> int:
    """The placement check (checks.guard's rule) with the ``--from`` release as the base: the
    definitions around each landed hunk there (its result is the ``--to`` file) against
    those where it landed on ``--onto``."""
    if not fp.path.endswith(".py") or res.content is None:
        return 0
    if any(r.status is Outcome.MERGED for r in res.hunks):
        return 0
    on_base = {r.index: r for r in apply_file(fp, base, 0).hunks}
    b_idx, t_idx = index(after), index(res.content)
    if b_idx.tree is None or t_idx.tree is None:
        return 0
    n = 0
    for h, r in zip(fp.hunks, res.hunks, strict=True):
        b = on_base.get(h.index)
        if b is None or b.status not in LANDED or r.status not in LANDED:
            continue
        was = _names(b_idx, _changed(h, _first(h, b)))
        now = _names(t_idx, _changed(h, _first(h, r)))
        if was != now:
            n += 1
            if len(examples) < 10:
                examples.append({"file": fp.path, "hunk": h.index, "base": was, "target": now})
    return n


def _check(series: str, version: str, use_port: bool) -> dict[str, object]:
    from bakery.commands import apply as commands
    from bakery.context import Context

    try:
        opts = commands.BakeOptions(vllm=version, use_port=use_port)
        report = commands.check(Context.here(), series, opts)
    except commands.ReportedError as e:
        report = e.report
    hunks = [(f.path, h) for d in report.diffs for f in d.files for h in f.hunks]
    warnings = [w for d in report.diffs for w in d.warnings]
    counts: dict[str, int] = {}
    for _, h in hunks:
        counts[h.status.value] = counts.get(h.status.value, 0) + 1
    return {
        "port": report.port,
        "applies": report.ok,
        "outcomes": counts,
        "ambiguous": [f"{p}: hunk {h.index}" for p, h in hunks if h.status is Outcome.AMBIGUOUS],
        "moved_def": [f"{p}: hunk {h.index}: {h.moved_def}" for p, h in hunks if h.moved_def],
        "contracts": [w for w in warnings if w.startswith("contract:")],
    }


def series_table(series: str, releases: list[str]) -> list[dict[str, object]]:
    rows = []
    for v in releases:
        own = _check(series, v, use_port=False)
        row: dict[str, object] = {"release": v, "own": own}
        ported = _check(series, v, use_port=True)
        if ported["port"]:
            row["port"] = ported
            row["resolved_by_port"] = [
                w for w in ported["contracts"] if "resolved by the port" in w
            ]  # type: ignore[attr-defined]
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--from", dest="old", default="0.29.0")
    c.add_argument("--to", dest="new", default="0.30.0")
    c.add_argument("--onto", default="0.28.0")
    c.add_argument("--under", default="", help="only files under this folder (vllm/)")
    s = sub.add_parser("series")
    s.add_argument("series", nargs="?", default="dcp2")
    s.add_argument(
        "--releases", nargs="+", default=["0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]
    )
    args = ap.parse_args()
    if shutil.which("diff") is None:
        print("GNU diff is needed", file=sys.stderr)
        return 2
    if args.what == "corpus":
        out: object = corpus(args.old, args.new, args.onto, args.under)
        r = out  # type: ignore[assignment]
        print(
            f"{r['hunks']} hunks in {r['files']} files; {r['ambiguous']} ambiguous "  # type: ignore[index]
            f"({100 * r['ambiguous_share']:.1f}%); old text in more than one place: "  # type: ignore[index]
            f"{r['old_text_in_more_than_one_place']}",  # type: ignore[index]
            file=sys.stderr,
        )
    else:
        out = series_table(args.series, args.releases)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
