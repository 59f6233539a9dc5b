"""``bakery init SERIES --vllm X``: start a series in minutes, as ``quilt new`` or
``gbp pq import`` do.

It writes ``launcher/SERIES/``: ``series.toml`` (every key explained; only ``base`` set),
an empty ``diffs/``, and ``tests/`` with one example test that imports the module the user
will change from the baked tree and uses the plugin's fixtures. It also gives a pristine
working tree to edit (default ``work/SERIES/``): the release as a baked tree of the empty
series, a git checkout whose HEAD is the pristine release and whose manifest says what it
was baked from, so that ``git diff`` in it, or ``bakery refresh SERIES --tree DIR
--new-diff NAME``, makes the diffs.

Nothing existing is replaced (the series folder, the tree: one line, exit 2), and nothing
is written outside the project (``--tree`` must lie inside it, and ``launcher/`` or
``work/`` that is a link out of it is refused), nor inside bakery's cache (which ``bakery
cache clean`` empties). The default ``work/`` gets a ``.gitignore`` of ``*``, so the
checkouts it holds are never committed to the project; a project without a ``.gitignore``
gets one for bakery's outputs (``build/``, ``dist/``, ``reports/``). Nothing here prints.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from bakery.bake.staging import display_path
from bakery.context import Context
from bakery.errors import BakeryError, UsageError
from bakery.patch.series import Series
from bakery.safety import paths
from bakery.sources import resolve as sources
from bakery.sources import versions

#: The module the example test imports (pure Python, in every release bakery supports).
EXAMPLE_MODULE = "vllm.sampling_params"

SERIES_TOML = """\
# The series {name}: an ordered folder of diffs against vLLM (see the README,
# "Your own series"). Every key is optional; bakery detects root and strip.

# The vLLM release the diffs are made against: `bakery apply {name}` bakes it, and
# `bakery refresh` of a tree of this release rewrites diffs/ (another release: a port
# in patches/{name}/<release>/). A release version, never a path or URL.
base = "{base}"

# The series' name in reports, build/<name>-<release>/ and patches/<name>/
# (default: the folder's name).
# name = "{name}"

# The folder inside the vLLM tree that the diffs' paths are relative to
# (default: detected; "" is the tree's top, where vllm/ lies).
# root = ""

# How many leading path parts to strip from the diffs' file names, as patch -p does:
# 1 for git's a/ and b/ prefixes (default: detected per series).
# strip = 1

# One line for `bakery list`.
# description = ""

# The environment the tests in tests/ need (`bakery verify --env`): "light" runs them
# in bakery's own (torch, Triton; packages' __init__.py not run), "full" in one with
# vLLM's requirements installed once (cached), so tests can import any pure-Python
# vllm module; verify, matrix --verify and port all use it. The example test imports
# vllm.sampling_params, which needs "full". (Unset: full on a GPU, else light.)
env = "full"
"""

EXAMPLE_TEST = '''\
"""An example test of the series {name}: edit it, or replace it with your own.

`bakery verify {name}` runs the files of this folder with pytest against a baked tree
(the last `bakery apply {name}`, or --tree DIR). The pytest plugin bakery.testing.plugin
gives every test these fixtures (session-scoped):

- baked_tree: the baked tree under test (a pathlib.Path);
- release:    the vLLM release it was baked from (its manifest), or None;
- interpret:  True when kernels run on the CPU with Triton's interpreter;
- device:     torch.device("cpu") under the interpreter, else torch.device("cuda");
- rank_pool:  rank_pool(world_size) runs functions on real torch.distributed ranks;
- expected:   the series' expectations.toml for the release, or None.

What a test may import: the standard library, pytest, torch and Triton (bakery's
own), and the baked tree's vllm modules through bakery.testing.load_tree_module,
which imports a module of the tree under its real name and refuses a stand-in.
Under `--env full` (series.toml's env = "full", as written by bakery init) bakery
installs the tree's requirements/common.txt once into a cached environment that
reuses its own torch and Triton, so any pure-Python vllm module loads, as
vllm.sampling_params does here. Under `--env light` vLLM's own dependencies are
absent and packages' __init__.py do not run: kernels and modules that import little
load, faster. verify says which modules came from the tree and which stood in.
"""

from __future__ import annotations

from pathlib import Path

from bakery.testing import load_tree_module


def test_the_module_comes_from_the_baked_tree(baked_tree: Path, release: str | None) -> None:
    module = load_tree_module("{module}")
    assert Path(module.__file__).resolve().is_relative_to(baked_tree.resolve())
    assert release is None or release.count(".") >= 1


def test_sampling_params_defaults() -> None:
    sampling_params = load_tree_module("{module}")
    params = sampling_params.SamplingParams(temperature=0.5)
    assert params.temperature == 0.5
    # a field your diff adds is checked the same way, e.g.:
    # assert sampling_params.SamplingParams().my_new_field == 0
'''


@dataclass(frozen=True)
class Initialized:
    series: Path
    base: str
    tree: Path | None
    #: what to do next, in order (the CLI prints them)
    next_steps: list[str]
    #: the project's .gitignore, where init wrote one (the project had none)
    gitignore: Path | None = None


def init(
    ctx: Context, name: str, vllm: str, *, tree: Path | None = None, with_tree: bool = True
) -> Initialized:
    """Write launcher/NAME/ and (with_tree) a pristine working tree; see the module."""
    home = ctx.home.absolute()
    try:
        name = paths.name(name, "SERIES")
    except paths.UnsafeDataError as e:
        raise UsageError(e.message) from None
    base = _release(vllm)
    folder = _launcher(home) / name
    work = _tree_place(ctx, home, name, tree) if with_tree else None
    for target, what in ((folder, "the series"), (work, "--tree")):
        if target is not None and (target.exists() or target.is_symlink()):
            raise UsageError(
                f"{display_path(target)} exists ({what}); bakery init replaces nothing"
            )
    if work is not None and not work.parent.exists():  # the default work/, in the project
        work.parent.mkdir(parents=True)
        _ignore_all(work.parent)
    _write_series(folder, name, base)
    try:
        if work is not None:
            _write_tree(ctx, folder, name, base, work)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # made just now: no half series stays
        raise
    ignore = _ignore_outputs(home)
    return Initialized(folder, base, work, _next_steps(name, base, work, home), ignore)


def _release(vllm: str) -> str:
    spec = vllm
    if spec == versions.LATEST:
        spec = sources.latest()
    if versions.parse(spec) is None:
        raise UsageError(
            f"--vllm {vllm!r}: bakery init starts from a release (0.32.0, 0.32, latest)"
        )
    return versions.normalize(spec)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _tree_place(ctx: Context, home: Path, name: str, tree: Path | None) -> Path:
    """Where the working tree goes: inside the project, through no link out of it, and
    never inside bakery's cache (``cache clean`` would delete it with the user's edits)."""
    work = (tree if tree is not None else home / "work" / name).absolute()
    shown = f"--tree {tree}" if tree is not None else f"work/{name}"
    folder = "work/" if tree is None else str(work.parent)  # as named, not resolved
    resolved_home = home.resolve()
    parent = work.parent.resolve() if work.parent.exists() else None
    inside = parent is not None and _inside(parent, resolved_home)
    if tree is not None and not inside:
        where = "its folder does not exist" if parent is None else "it lies outside the project"
        # the project by its path: display_path would say "." from the project itself
        raise UsageError(f"--tree {tree}: {where}; choose a folder in the project ({home})")
    if parent is None and work.parent.is_symlink():
        raise UsageError(f"{shown}: {folder} is a link to nothing; remove it")
    if parent is not None and not inside:
        raise UsageError(
            f"{shown}: {folder} leads outside the project (a link?); "
            "bakery init writes only inside it: remove the link or give --tree"
        )
    real = (parent if parent is not None else resolved_home / "work") / work.name
    cache = ctx.cache.root.resolve()
    if _inside(real, cache) or _inside(cache, real):
        raise UsageError(
            f"{shown}: lies inside bakery's cache ({cache}), which `bakery cache clean` "
            "empties; choose a folder of the project"
        )
    return work


def _ignore_all(folder: Path) -> None:
    """work/.gitignore with ``*``: the working trees (a whole vLLM checkout each) are
    never added to the project by ``git add -A``, whatever the project's own .gitignore."""
    from bakery.outputs import replace_bytes

    if not (folder / ".gitignore").exists() and not (folder / ".gitignore").is_symlink():
        replace_bytes(
            folder / ".gitignore",
            b"# bakery init's working trees: git checkouts of vLLM, never part of the project\n*\n",
        )


#: What bakery writes into the project that is never part of it: baked trees (nested git
#: checkouts), wheels and sdists, CI reports.
OUTPUTS_IGNORE = (
    b"# bakery's outputs: baked trees (git checkouts of vLLM), packages, CI reports\n"
    b"/build/\n/dist/\n/reports/\n"
)


def _ignore_outputs(home: Path) -> Path | None:
    """The project's .gitignore for build/, dist/ and reports/, where it has none (one it
    has is the team's: never changed). The written file, or None."""
    from bakery.outputs import replace_bytes

    target = home / ".gitignore"
    if target.exists() or target.is_symlink():
        return None
    replace_bytes(target, OUTPUTS_IGNORE)
    return target


def _launcher(home: Path) -> Path:
    """launcher/, refused when it leads outside the project (a link out of it)."""
    launcher = home / "launcher"
    if launcher.is_symlink() and not _inside(launcher.resolve(), home.resolve()):
        raise UsageError(
            "launcher/ leads outside the project (a link); bakery init writes only inside it"
        )
    return launcher


def _write_series(folder: Path, name: str, base: str) -> None:
    try:
        (folder / "diffs").mkdir(parents=True)
        (folder / "tests").mkdir()
        (folder / "series.toml").write_text(SERIES_TOML.format(name=name, base=base))
        (folder / "tests" / "test_example.py").write_text(
            EXAMPLE_TEST.format(name=name, module=EXAMPLE_MODULE)
        )
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise UsageError(f"{display_path(folder)}: {e.strerror}") from None


def _write_tree(ctx: Context, folder: Path, name: str, base: str, work: Path) -> None:
    """The pristine release as a baked tree of the empty series (a git checkout whose
    manifest refresh reads), through the same path as ``bakery apply``."""
    from bakery.bake.tree import bake

    series = Series(name=name, path=folder, diff_paths=(), base=base, tests=folder / "tests")
    from bakery.logs import muted

    pristine = sources.resolve(base, ctx.cache, progress=ctx.progress)
    try:
        # muted: a bake of no diff has no layout to detect ("strip 1, root '.'" would
        # contradict the series.toml just written); the CLI names the tree it wrote
        with muted():
            report = bake(series, pristine, work)
    finally:
        pristine.close()
    if report.status != "baked":  # an empty series always bakes
        raise BakeryError(f"the pristine tree of vLLM {base} could not be written: {report.error}")


def _next_steps(name: str, base: str, work: Path | None, home: Path) -> list[str]:
    if work is None:
        return [f"write diffs into launcher/{name}/diffs/ (NN-name.diff), then bakery apply {name}"]
    rel = display_path(work)
    return [
        f"edit the files of {rel} (a git checkout of vLLM {base})",
        f"bakery refresh {name} --tree {rel} --new-diff NAME   (or: git -C {rel} diff "
        f"> launcher/{name}/diffs/01-NAME.diff)",
        f"bakery apply {name}",
        f"bakery verify {name}   (--env full: tests import any pure-Python vllm module)",
    ]
