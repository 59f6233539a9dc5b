"""``--strict``: a series that applies, but not exactly as written, fails.

Like ungoogled-chromium's patch validator and dpkg-source, which refuse fuzz: a hunk found
at an offset, with fuzz, by a three-way merge, in more than one place (``ambiguous``), or
inside another definition than on the base release (``moved-def``) applied, but nothing
checked that it applied *right*. Without ``--strict`` these are reported; with it they fail.

Works on the JSON form of diffs (``DiffResult.to_json()``), so that the matrix, whose
workers send JSON back, and apply/check share one rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Hunk outcomes that ``--strict`` refuses.
STRICT_OUTCOMES = ("offset", "fuzz", "merged", "merged-syntax", "ambiguous")
#: Outcomes that applied but ask for a look: never rendered as a plain pass.
REVIEW_OUTCOMES = ("fuzz", "merged", "merged-syntax", "ambiguous")


def _hunks(diffs: Iterable[Mapping[str, object]]) -> Iterable[tuple[str, str, dict[str, object]]]:
    for d in diffs:
        for f in d.get("files", []):  # type: ignore[attr-defined]
            for h in f["hunks"]:
                yield str(d["name"]), str(f["path"]), h


def strict_problems(diffs: Iterable[Mapping[str, object]]) -> list[str]:
    """One line per hunk that ``--strict`` refuses, naming the diff, file, hunk and why."""
    out = []
    for name, path, h in _hunks(diffs):
        why = []
        if h["status"] in STRICT_OUTCOMES:
            why.append(str(h["status"]))
        moved = h.get("moved_def")
        if isinstance(moved, dict):
            why.append(f"moved-def ({moved['base']} -> {moved['target']})")
        if why:
            out.append(f"{name}: {path}: hunk {h['index']} (line {h['line']}): {', '.join(why)}")
    return out


def needs_review(diffs: Iterable[Mapping[str, object]]) -> bool:
    """True when a hunk applied by fuzz, merge or an ambiguous match, or moved definition."""
    return any(h["status"] in REVIEW_OUTCOMES or h.get("moved_def") for _, _, h in _hunks(diffs))


def identity_problems(report: Mapping[str, object]) -> list[str]:
    """``--strict`` also refuses a release's port taken for a tree that is not that
    pristine release (sources/identity.py): it was proven on another tree."""
    vllm = report.get("vllm")
    identity = vllm.get("identity") if isinstance(vllm, Mapping) else None
    port = report.get("port")
    if not port or not isinstance(identity, Mapping) or identity.get("pristine"):
        return []
    return [
        f"{port}: a port of the pristine {identity.get('claims')} taken for "
        f"{identity.get('version')}, a tree that is not that release"
    ]
