"""The package layout is a promise: imports go one way, and the README names every module.

Every module under src/bakery is parsed (ast, never imported), and each of its imports of
another bakery package (at the top, inside a function, or under ``TYPE_CHECKING``) must go
to a package of its own layer or a lower one:

    cli > commands > porting, package, reports > verifying > testing > bake > checks > context
        > patch, sources, formats, git
        > model, project, safety, errors, outputs, redaction, logs, process

Packages of one layer may import each other, but the package graph has no cycle. The
README's "Layout" section names each package and each of its modules, so a newcomer finds
a module where it lives, and a module that is added or moved updates it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "bakery"

#: Highest first. ``__main__`` is the CLI's own start; ``bakery`` (the package's
#: ``__init__``: its version) is below everything.
LAYERS: list[set[str]] = [
    {"__main__", "cli"},
    {"commands"},
    {"porting", "package", "reports"},
    {"verifying"},
    {"testing"},
    {"bake"},
    {"checks"},
    {"context"},
    {"patch", "sources", "formats", "git"},
    {"model", "project", "safety", "errors", "outputs", "redaction", "logs", "process"},
    {"bakery"},
]
RANK = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _package(path: Path) -> str:
    """The package (or top-level module) a source file belongs to."""
    parts = path.relative_to(SRC).parts
    if len(parts) == 1:
        return "bakery" if parts[0] == "__init__.py" else parts[0][:-3]
    return parts[0]


def _dotted(path: Path) -> list[str]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ["bakery", *parts]


def _targets(path: Path, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, dotted name) of every bakery module or name this module imports."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _dotted(path)[: -node.level]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out += [(node.lineno, f"{module}.{a.name}") for a in node.names]
    return [(line, name) for line, name in out if name.split(".")[0] == "bakery"]


def _target_package(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1 or parts[1] == "__version__":
        return "bakery"
    return parts[1]


def _graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the import sites ("file:line")."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in _modules():
        mine = _package(path)
        for line, name in _targets(path, ast.parse(path.read_text(), str(path))):
            theirs = _target_package(name)
            if theirs != mine:
                graph[mine][theirs].append(f"{path.relative_to(ROOT)}:{line} ({name})")
    return graph


def test_every_package_has_a_layer() -> None:
    unknown = {_package(p) for p in _modules()} - RANK.keys()
    assert not unknown, f"packages with no layer in tests/test_layers.py: {sorted(unknown)}"


def test_imports_never_go_up_a_layer() -> None:
    upward = [
        f"{site}: {mine} -> {theirs}"
        for mine, edges in _graph().items()
        for theirs, sites in edges.items()
        for site in sites
        if RANK.get(theirs, -1) < RANK[mine]
    ]
    assert not upward, "imports that go up a layer:\n" + "\n".join(upward)


def test_packages_import_each_other_without_cycles() -> None:
    graph = _graph()
    cycles: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(pkg: str, path: list[str]) -> None:
        state[pkg] = 1
        for theirs in sorted(graph.get(pkg, {})):
            if state.get(theirs) == 1:
                loop = [*path[path.index(theirs) :], theirs]
                sites = [graph[a][b][0] for a, b in zip(loop, loop[1:], strict=False)]
                cycles.append(" -> ".join(loop) + "\n  " + "\n  ".join(sites))
            elif theirs not in state:
                visit(theirs, [*path, theirs])
        state[pkg] = 2

    for pkg in sorted(graph):
        if pkg not in state:
            visit(pkg, [pkg])
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def _module_graph() -> dict[str, dict[str, int]]:
    """module -> imported module -> the first line importing it (``from bakery.x import
    name`` counts as importing module ``bakery.x``; a package's ``__init__`` is left out,
    since importing a submodule runs it without depending on it)."""
    modules = {}
    for path in _modules():
        dotted = _dotted(path)
        if dotted[-1] != "__init__":
            modules[".".join(dotted)] = path
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for line, target in _targets(path, ast.parse(path.read_text(), str(path))):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def test_modules_import_each_other_without_cycles() -> None:
    """Inside a package too: no module imports (at the top, lazily in a function, or for
    types) a module that imports it back, directly or through others."""
    graph = _module_graph()
    cycles: list[str] = []
    state: dict[str, int] = {}

    def visit(mod: str, path: list[str]) -> None:
        state[mod] = 1
        for theirs in sorted(graph[mod]):
            if state.get(theirs) == 1:
                loop = [*path[path.index(theirs) :], theirs]
                cycles.append(
                    " -> ".join(
                        f"{a} (line {graph[a][b]})" for a, b in zip(loop, loop[1:], strict=False)
                    )
                )
            elif theirs not in state:
                visit(theirs, [*path, theirs])
        state[mod] = 2

    for mod in sorted(graph):
        if mod not in state:
            visit(mod, [mod])
    assert not cycles, "import cycles between modules:\n" + "\n".join(cycles)


def test_the_module_check_sees_a_lazy_cycle(tmp_path: Path) -> None:
    """The module graph resolves ``from bakery.x import name`` and relative imports inside
    functions to their module (so the cycle test above can fail)."""
    graph = _module_graph()
    src = "def f():\n    from .resolve import release\n    from bakery.sources.cache import Cache\n"
    path = SRC / "sources" / "gitsource.py"
    names = [name for _, name in _targets(path, ast.parse(src))]
    assert names == ["bakery.sources.resolve.release", "bakery.sources.cache.Cache"]
    assert "bakery.sources.gitsource" in graph["bakery.sources.resolve"]


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The parser above resolves relative and function-level imports (so the tests above
    can fail): a relative import two levels up from a bake module names its package."""
    src = "def f():\n    from ..commands import apply\n    import bakery.cli.app\n"
    path = SRC / "model" / "report.py"
    names = [name for _, name in _targets(path, ast.parse(src))]
    assert names == ["bakery.commands.apply", "bakery.cli.app"]
    assert [_target_package(n) for n in names] == ["commands", "cli"]


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Layout\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert m, "README.md has no '## Layout' section"
    return m.group(1)


def test_readme_layout_names_every_module() -> None:
    """One table row per package (``pkg/``) naming each of its modules (a subpackage's as
    ``sub/module.py``); the top-level modules each have their own row."""
    rows: dict[str, set[str]] = {}
    for line in _layout_section().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`src/bakery/"):
            continue
        key = cells[0].strip("`").removeprefix("src/bakery/").rstrip("/")
        words = re.findall(r"`([\w./]+)`", " ".join(cells[1:]))
        rows[key] = {w for w in words if not w.endswith("/")}  # a folder named is no module
    missing: list[str] = []
    for path in _modules():
        parts = path.relative_to(SRC).parts
        if len(parts) == 1:
            if parts[0] != "__init__.py" and parts[0] not in rows:
                missing.append(parts[0])
            continue
        name = "/".join(parts[1:]).removesuffix(".py")
        if path.stem == "__init__":
            if len(parts) == 2 and parts[0] not in rows:
                missing.append(f"{parts[0]}/")
            continue
        if name not in rows.get(parts[0], set()) and f"{name}.py" not in rows.get(parts[0], set()):
            missing.append("/".join(parts))
    assert not missing, "README.md Layout does not name: " + ", ".join(missing)
    stale = [
        f"{pkg}/{m}"
        for pkg, mods in rows.items()
        if (SRC / pkg).is_dir()
        for m in mods
        if not (SRC / pkg / f"{m.removesuffix('.py')}.py").is_file()
    ]
    assert not stale, "README.md Layout names modules that do not exist: " + ", ".join(stale)


def _private_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Imports of another distribution's private module or name (``typer._click``)."""

    def private(name: str) -> bool:
        parts = name.split(".")
        return parts[0] not in {"bakery", "__future__"} and any(
            p.startswith("_") and not p.startswith("__") for p in parts[1:]
        )

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            whole = [f"{node.module}.{a.name}" for a in node.names]
            names = [node.module] if private(node.module) else whole
        else:
            continue
        found += [(node.lineno, name) for name in names if private(name)]
    return found


#: The one private name bakery reads, on purpose: pip's default index has no public
#: API, and the brief forbids writing a registry's host name into the code. The import is
#: lazy and guarded (a pip that moved it is "not known here", one line, exit 2).
PRIVATE_ALLOWED = {"sources/pipconf.py: pip._internal.models.index"}


def test_no_private_module_of_a_dependency_is_imported() -> None:
    """bakery leans on its libraries' public API only (typer's vendored ``typer._click``
    is why typer is held below 0.26)."""
    found = {
        f"{path.relative_to(SRC)}: {name}"
        for path in _modules()
        for _, name in _private_imports(ast.parse(path.read_text()))
    }
    assert found - PRIVATE_ALLOWED == set()


def test_the_private_import_check_sees_one() -> None:
    tree = ast.parse("from typer import _click\nimport os._x\nfrom typer.core import Ok\n")
    assert _private_imports(tree) == [(1, "typer._click"), (2, "os._x")]


#: A module a newcomer reads in one sitting (issue 44: the CLI had grown to 984 lines).
MAX_MODULE_LINES = 600


def _too_long(paths: list[Path]) -> list[str]:
    return [
        f"{p.relative_to(p.parents[1])}: {n} lines"
        for p in paths
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]


def test_no_module_is_longer_than_a_sitting() -> None:
    assert _too_long(_modules()) == []


def test_the_length_check_sees_a_long_module(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    long, short = tmp_path / "pkg" / "long.py", tmp_path / "pkg" / "short.py"
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    short.write_text("x = 1\n" * MAX_MODULE_LINES)
    assert _too_long([long, short]) == [f"pkg/long.py: {MAX_MODULE_LINES + 1} lines"]
