"""What is known of a tree's content (issue 45): a verify's verdict, kept in bakery's cache
by the digest of the tree's files, and read back by whatever would publish the tree.

A verdict is never written into the tree: the tree's files are what the verdict is about
(a file written there would change them), and a tree baked again from the same inputs, or
copied elsewhere, has the same content and so the same proof. The digest is the one verify's
reuse records take (``reuse.tree_digest``: every file but ``.git`` and byte code, about
0.4 s of CPU for a vLLM tree). Layout: ``CACHE/proofs/DIGEST.json``, plain JSON
(``{"format", "state", "reason", "date", "tree"}``); a record that does not parse is
ignored (the tree is then as unproven as one without a record). Hand-written: a few lines
of JSON keyed by a digest the project already computes.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bakery.model.report import Proof

if TYPE_CHECKING:
    from bakery.verifying.runner import VerifyResult

FOLDER = "proofs"
FORMAT = 1


def digest(tree: Path) -> str:
    from bakery.testing.reuse import tree_digest

    return tree_digest(tree)


def record(cache_root: Path, tree: Path, proof: Proof, content: str | None = None) -> None:
    """Keep ``proof`` (a verify's verdict) for the tree's present content. A read-only cache
    only forgets: the verdict stands for this run."""
    key = content or digest(tree)
    data = {
        "format": FORMAT,
        **proof.to_json(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "tree": str(tree),
    }
    with contextlib.suppress(OSError):
        folder = cache_root / FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        final = folder / f"{key}.json"
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, final)


def recorded(cache_root: Path, tree: Path, content: str | None = None) -> Proof | None:
    """The verdict recorded for the tree's present content, or None."""
    folder = cache_root / FOLDER
    if not folder.is_dir():
        return None  # nothing was ever verified: no digest to pay for
    path = folder / f"{content or digest(tree)}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    found = Proof.from_json(data)
    if found is None or found.state not in ("verified", "failed"):
        return None
    date = data.get("date")
    return Proof(found.state, f"{found.reason} ({date})" if isinstance(date, str) else found.reason)


def of_tree(cache_root: Path, tree: Path) -> Proof:
    """The tree's proof: a recorded verdict for its content, else what its manifest says
    (``unverified``, or ``stale``), else ``unverified``."""
    from bakery.model import manifest as manifests

    found = recorded(cache_root, tree)
    if found is not None:
        return found
    m = manifests.read(tree)
    if m is not None and m.proof is not None and m.proof.state in ("unverified", "stale"):
        return m.proof
    return Proof("unverified", "no verify recorded for this content")


def of_result(result: VerifyResult, device: str) -> Proof | None:
    """A verify's verdict as a proof: ``verified`` (exit 0), ``failed`` (tests ran and one
    failed or errored); None for a verify that could not run or ran no test (it proves
    nothing either way)."""
    counts = f"{result.passed} passed, {result.failed} failed, {result.skipped} skipped"
    if result.exit_code == 0 and result.passed:
        oracle = "; pristine oracle not run" if result.pristine_not_run else ""
        return Proof("verified", f"the series' tests passed {device} ({counts}{oracle})")
    if result.failed or result.errors:
        return Proof("failed", f"the series' tests failed {device} ({counts})")
    return None


def record_result(cache_root: Path, tree: Path, result: VerifyResult, device: str) -> Proof | None:
    """Record what a verify of ``tree`` proved (``of_result``); the proof, or None."""
    found = of_result(result, device)
    if found is not None:
        record(cache_root, tree, found)
    return found
