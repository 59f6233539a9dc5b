"""Which rules a tree's code calls for: features probed from its pristine files.

A tree that is not a pristine release (a checkout of main, ``0.31.0.dev0``, a release
someone edited: sources/identity.py) has no entry of its own in a series'
``expectations.toml``; the newest release below its version is the wrong answer when the
tree already has the next release's code. A series names its features' probes::

    [probe.score_dtype]
    file = "vllm/model_executor/kernels/attention/dsa/candidate_blocks.py"
    parameter = "select_candidate_blocks.score_dtype"   # a function's parameter
    [probe.rocm_topk]
    file = "..."
    defines = "_rocm_select_topk"                        # a top-level def or class
    [probe.deep_select]
    file = "..."
    calls = "deep_select_topk"                           # a call anywhere in the file
    [probe.nan_select]
    file = "..."
    contains = "only -inf denotes padding"               # a line of text

Probes read the *pristine* files the bake started from (the baked tree's first commit,
``pristine_commit`` in its manifest, read through the one git door), never the baked files:
a port that dropped an upstream feature must still be asked for it. Parsing is Python's own
``ast``: no code of the tree runs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from pathlib import Path

from bakery.git import cmd as gitutil

KINDS = ("defines", "parameter", "calls", "contains")

Reader = Callable[[str], bytes | None]


def pristine_reader(tree: Path, commit: str | None) -> Reader:
    """Files of the bake's pristine commit (or of the tree itself without one)."""

    def read(rel: str) -> bytes | None:
        if commit:
            return gitutil.stdout_of(
                gitutil.git(tree, "cat-file", "blob", f"{commit}:{rel}", raw=True)
            )
        p = tree / rel
        return p.read_bytes() if p.is_file() and not p.is_symlink() else None

    return read


def _defs(module: ast.Module) -> dict[str, ast.AST]:
    return {
        n.name: n
        for n in module.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _has(kind: str, what: str, source: bytes) -> bool:
    if kind == "contains":
        return what.encode() in source
    try:
        module = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    if kind == "defines":
        return what in _defs(module)
    if kind == "parameter":
        func, _, param = what.partition(".")
        node = _defs(module).get(func)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        a = node.args
        return param in {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    # calls
    for node in ast.walk(module):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name == what:
                return True
    return False


def check_probe(name: str, entry: object, where: str) -> tuple[str, str, str]:
    """(file, kind, what) of one probe table; ValueError naming what is wrong."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("file"), str):
        raise ValueError(f"{where}: probe {name} needs a file")
    kinds = [k for k in KINDS if k in entry]
    if len(kinds) != 1 or not isinstance(entry[kinds[0]], str):
        raise ValueError(f"{where}: probe {name} needs one of {', '.join(KINDS)}")
    unknown = set(entry) - {"file", *KINDS}
    if unknown:
        raise ValueError(f"{where}: probe {name}: unknown keys {', '.join(sorted(unknown))}")
    return entry["file"], kinds[0], entry[kinds[0]]


def probe(probes: Mapping[str, tuple[str, str, str]], read: Reader) -> frozenset[str]:
    """The features whose probe finds its code in the files ``read`` gives."""
    found = set()
    files: dict[str, bytes | None] = {}
    for name, (rel, kind, what) in probes.items():
        if rel not in files:
            files[rel] = read(rel)
        source = files[rel]
        if source is not None and _has(kind, what, source):
            found.add(name)
    return frozenset(found)
