"""A verify's verdict kept by the content it was about (issue 45): the one key and the one
store every command's proof reads (``bakery.commands.proof``), written by the runner itself
(:func:`bakery.verifying.runner.run_verify`), so that a verify by any path (``bakery
verify``, ``port``, ``port --update``, ``wheel``, ``matrix --verify``, ``ci verify``) makes
that content's proof.

The key is the content a bake writes and the tests read: every entry of the tree (its
relative path and the sha256 of a file's bytes, a link's target: ``reuse``'s walk) but
``.git``, byte code and ``.bakery/``, and of ``.bakery/manifest.json`` only what the tests
read (:func:`bake_facts`: the release, the diffs' names). The rest of the manifest is
bakery's account of the bake (the folder it was written to, the port it took, the diffs'
commits), not content: a tree baked from a port that ``port --update`` proved, or baked
into another folder by ``matrix``, has other words there and the same files. Leaving it
out also lets ``check`` name the content it plans without writing a tree
(:func:`planned`): the pristine release's entries laid out as a bake copies them, with the
planned writes over them.

Layout: ``CACHE/proofs/DIGEST.json``, plain JSON (``{"format", "state", "reason", "date",
"tree"}``); a record that does not parse is ignored. Hand-written: a few lines of JSON keyed
by a digest the reuse records' walk already gives.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from bakery.model import records
from bakery.model.report import MANIFEST, Proof, read_proof
from bakery.testing.reuse import _SKIP_DIRS, _walk


class VerifyResult(Protocol):
    """What a verdict reads of ``runner.VerifyResult`` (the runner imports this module)."""

    @property
    def exit_code(self) -> int: ...
    @property
    def passed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def pristine_not_run(self) -> str | None: ...


FOLDER = "proofs"
FORMAT = 2  # 2: the key leaves .bakery/ out (format 1's keys were whole-tree digests)
_OWN = MANIFEST.parts[0] + "/"
_SKIP = frozenset({*_SKIP_DIRS, ".git"})
#: pytest arguments that do not narrow what runs: a run with only these is the whole suite
_WHOLE = re.compile(r"-[qv]+|--quiet|--verbose|--bakery-no-pristine|--bakery-pristine=.*")


def _hash(entries: Iterable[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for rel, what in sorted(entries):
        h.update(os.fsencode(rel) + b"\0" + os.fsencode(what) + b"\0")
    return h.hexdigest()


def _entries(folder: Path, prefix: str = "") -> dict[str, str]:
    return {
        prefix + rel: what
        for rel, what in _walk(str(folder), recursive=True, skip=_SKIP)
        if not (prefix + rel).startswith(_OWN)
    }


def bake_facts(
    version: str | None, claims: str | None, pristine: bool | None, diffs: Iterable[str]
) -> tuple[str, str]:
    """What the series' tests read of the manifest (``testing.expect.Bake.of``: the release
    it declares, whether it is that release, the diffs applied), as one entry of the key:
    the same files under another release's expectations are other content."""
    return "\0bake", json.dumps([version or claims, pristine is not False, list(diffs)])


def _manifest_facts(tree: Path) -> tuple[str, str] | None:
    from bakery.errors import BakeryError
    from bakery.model import manifest as manifests

    try:
        m = manifests.read(tree)
    except BakeryError:
        return "\0bake", "unreadable"
    if m is None:
        return None
    return bake_facts(m.version, m.claims, m.pristine, (d.name for d in m.diffs))


def digest(tree: Path) -> str:
    """The content key of a tree on disk."""
    entries = _entries(tree)
    facts = _manifest_facts(tree)
    if facts is not None:
        entries[facts[0]] = facts[1]
    return _hash(entries.items())


def planned(
    base: Path,
    prefix: str,
    writes: Iterable[Mapping[str, tuple[bytes | None, object]]],
    facts: tuple[str, str],
) -> str:
    """The content key of the tree a bake would write: ``base``'s entries under ``prefix``
    (as the bake copies the pristine release), then each diff's writes (path -> content,
    None for a deleted file) in order, and the ``facts`` its manifest will state
    (:func:`bake_facts`). Equal to :func:`digest` of the written tree."""
    entries = _entries(base, prefix)
    entries[facts[0]] = facts[1]
    for diff in writes:
        for rel, (content, _) in diff.items():
            if content is None:
                entries.pop(rel, None)
            else:
                entries[rel] = hashlib.sha256(content).hexdigest()
    return _hash(entries.items())


def whole_suite(pytest_args: Iterable[str]) -> bool:
    """A run of every test: its verdict is the content's (a ``-k`` or a path is not)."""
    return all(_WHOLE.fullmatch(a) for a in pytest_args)


def record(cache_root: Path, tree: Path, proof: Proof, content: str | None = None) -> None:
    """Keep ``proof`` (a verify's verdict) for the tree's present content. A read-only cache
    only forgets: the verdict stands for this run."""
    key = content or digest(tree)
    data = {
        "format": FORMAT,
        **records.plain(proof),
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


def any_recorded(cache_root: Path) -> bool:
    """Whether a verdict was ever kept (else no content key is worth its cost)."""
    return (cache_root / FOLDER).is_dir()


def recorded(cache_root: Path, content: str) -> Proof | None:
    """The verdict recorded for ``content`` (a key of :func:`digest` or :func:`planned`)."""
    path = cache_root / FOLDER / f"{content}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    found = read_proof(data)
    if found is None or found.state not in ("verified", "failed"):
        return None
    date = data.get("date")
    return Proof(found.state, f"{found.reason} ({date})" if isinstance(date, str) else found.reason)


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
