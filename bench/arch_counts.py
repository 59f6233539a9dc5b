"""The architecture figures of issue 23, counted from the source (for the closing note).

    python bench/arch_counts.py [SRC]

Modules per package; functions whose signature takes ``events``, ``progress``, ``cache``
or ``home``; annotations naming ``Any`` or ``dict[str, object]``; functions that take more
than five parameters; module import cycles (module-level, lazy and TYPE_CHECKING imports
alike). Hand-written over ``ast``: the counts are the point, and no tool counts these.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter, defaultdict
from pathlib import Path

CONTEXT = ("events", "progress", "cache", "home")


def _modules(src: Path) -> dict[str, Path]:
    out = {}
    for path in sorted((src / "bakery").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name.split(".")[: -node.level] if node.level else []
                base = ".".join([*pkg, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in known and m != name}


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in graph[todo.pop()] - seen:
            seen.add(w)
            todo.append(w)
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other (strongly connected, more than one)."""
    reach = {v: _reach(graph, v) for v in graph}
    groups = {frozenset({v} | {w for w in reach[v] if v in reach[w]}) for v in graph}
    return sorted(sorted(g) for g in groups if len(g) > 1)


def main(src: Path) -> None:
    mods = _modules(src)
    per_pkg: Counter[str] = Counter()
    takes: Counter[str] = Counter()
    wide = 0
    annotations: Counter[str] = Counter()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        parts = name.split(".")
        is_pkg = path.name == "__init__.py" and len(parts) > 1
        per_pkg[parts[1] if len(parts) > 2 or is_pkg else "(top)"] += 1
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = _imports(name, tree, set(mods))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
                params = [p for p in params if p not in ("self", "cls")]
                for p in CONTEXT:
                    takes[p] += p in params
                wide += len(params) > 5
            if isinstance(node, (ast.arg, ast.AnnAssign)) or (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns
            ):
                ann = node.annotation if not isinstance(node, ast.FunctionDef) else node.returns
                text = ast.unparse(ann) if ann is not None else ""
                annotations["Any"] += "Any" in text.replace("AnyStr", "")
                annotations["dict[str, object]"] += "dict[str, object]" in text
    print(f"modules: {len(mods)}")
    for pkg, n in sorted(per_pkg.items()):
        print(f"  {pkg:10} {n}")
    print("functions taking: " + ", ".join(f"{p} {takes[p]}" for p in CONTEXT))
    print(f"functions with more than 5 parameters: {wide}")
    print("annotations naming: " + ", ".join(f"{k} {v}" for k, v in annotations.items()))
    cycles = _cycles(graph)
    print(f"import cycles (strongly connected groups of modules): {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "src")
