"""The conventions users bring from git, quilt, pip and pytest (issue 16): output that can be
piped, usage errors of one line, options and help, exit codes, next steps that can be
pasted, versions as people type them, the umask, progress without a terminal.

CliRunner runs the CLI in-process with a fixed width; where a terminal or a pipe matters,
a real ``python -m bakery`` runs with its stdout on a pipe. Releases come from the test's
own cache (tests.support.releases.release) or a local tree; the one index is served on
127.0.0.1 by the test.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from rich.console import Console
from typer.testing import CliRunner

from bakery.cli import parsing, render
from bakery.sources import versions
from tests.support.index import Index
from tests.support.paths import PROJECT
from tests.support.releases import BASE, release, series
from tests.support.series import make_series, udiff
from tests.support.trees import Tiny

Cli = Callable[..., Result]


def run_bakery(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A real ``python -m bakery`` with stdout and stderr on pipes (no terminal)."""
    full = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    full["PYTHONPATH"] = str(PROJECT / "src")
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bakery", *map(str, args)],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def invoke(*args: str | Path, columns: int = 200) -> Result:
    from bakery.cli.app import app

    return CliRunner().invoke(
        app, [str(a) for a in args], env={"COLUMNS": str(columns)}, catch_exceptions=False
    )


def break_hunk(tiny: Tiny) -> None:
    k = tiny.src / "vllm/model_executor/k.py"
    k.write_text(k.read_text().replace("    return 14\n", "    return 14  # upstream\n"))


# --- output -----------------------------------------------------------------------------------


def test_json_dash_puts_the_report_on_stdout_and_the_rest_on_stderr(cli: Cli, tiny: Tiny) -> None:
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "out", "--json", "-")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)  # stdout is the report and nothing else
    assert report["status"] == "baked" and report["out"] == "out"
    assert "baked out" in r.stderr and "Applying 01-kernel.diff" in r.stderr
    # a conflict and an error after the series was read: still the report on stdout
    break_hunk(tiny)
    r = cli("check", "demo", "--vllm", tiny.src, "--json", "-")
    assert r.exit_code == 1 and json.loads(r.stdout)["status"] == "conflict"
    r = cli("apply", "demo", "--vllm", tiny.src / "nowhere", "--json", "-")
    assert r.exit_code == 2 and json.loads(r.stdout)["status"] == "error"
    assert r.stderr.count("error:") == 1


def test_piped_markdown_is_not_wrapped(cli: Cli, tmp_path: Path) -> None:
    long = "0" * 90
    report = {
        "series": "s",
        "ok": True,
        "releases": [
            {
                "version": "1.0.0",
                "status": "baked",
                "port": f"patches/s/{long}",
                "error": None,
                "verify": "passed",
                "diffs": [],
            }
        ],
    }
    (tmp_path / "r.json").write_text(json.dumps(report))
    p = run_bakery("summarize", "r.json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("|")]
    assert len(rows) == 3 and all(ln.endswith("|") for ln in rows)
    assert f"patches/s/{long}" in rows[2]


def test_piped_human_output_is_not_wrapped(tiny: Tiny, tmp_path: Path, home: Path) -> None:
    deep = "d" * 70
    out = tmp_path / deep / "out"
    p = run_bakery(
        "apply",
        "demo",
        "--vllm",
        tiny.src,
        "--out",
        out,
        cwd=tmp_path,
        env={"BAKERY_HOME": str(home)},
    )
    assert p.returncode == 0, p.stderr
    assert any(
        ln.startswith("baked ") and ln.split()[1].endswith("/out") for ln in p.stdout.splitlines()
    )


def test_matrix_grid_is_readable_at_80_columns(home: Path, tmp_path: Path) -> None:
    names = [f"0{i}-a-rather-long-name-of-a-diff-number-{i}.diff" for i in (1, 2, 3)]
    for v in ("1.0.0", "1.1.0", "1.10.0rc1"):
        release(v, {"vllm/a.py": BASE, "vllm/b.py": BASE, "vllm/c.py": BASE})
    make_series(
        home,
        "s",
        {
            n: udiff(f, BASE, BASE.replace("line9\n", "NINE\n"))
            for n, f in zip(names, ("a.py", "b.py", "c.py"), strict=True)
        },
        'base = "1.0.0"\nroot = "vllm"\nstrip = 1\n',
    )
    r = invoke("matrix", "s", "--vllm", "1.0.0", "1.1.0", "1.10.0rc1", "-j", "1", columns=80)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), r.stdout
    for v in ("1.0.0", "1.1.0", "1.10.0rc1"):
        assert any(ln.split()[1:2] == [v] for ln in lines if "│" in ln), (v, r.stdout)
    for n in names:  # each column's diff is named under the grid
        assert any(ln.strip() == f"{n[:2]}: {n}" for ln in lines), r.stdout
    quiet = invoke("matrix", "s", "--vllm", "1.0.0", "1.10.0rc1", "-j", "1", "-q")
    assert quiet.stdout == "1.0.0 baked\n1.10.0rc1 baked\n" and quiet.stderr == ""


# --- options, help, usage errors --------------------------------------------------------------


def test_quiet_and_verbose(cli: Cli, tiny: Tiny) -> None:
    quiet = cli("apply", "demo", "--vllm", tiny.src, "--out", "a", "-q")
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == "" and quiet.stdout.startswith("baked a (")
    assert len(quiet.stdout.splitlines()) == 1
    loud = cli("-v", "apply", "demo", "--vllm", tiny.src, "--out", "b")
    assert loud.exit_code == 0
    from bakery.model.manifest import read as read_manifest

    manifest = read_manifest(tiny.src.parent / "b")
    assert manifest is not None
    assert all(f"commit {d.commit}" in loud.stdout for d in manifest.diffs)
    assert "Applying" in loud.stderr


def test_names_are_printed_as_written_never_as_emoji(cli: Cli, tiny: Tiny) -> None:
    """rich turns ``:warning:`` into an emoji unless told not to: a path holding one is
    printed as the user wrote it."""
    result = cli("apply", "demo", "--vllm", tiny.src, "--out", "x:warning:y", "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("baked x:warning:y ("), result.stdout


def test_version_short_and_long(cli: Cli) -> None:
    from bakery import __version__

    assert cli("-V").stdout == f"bakery {__version__}\n"
    assert cli("--version").stdout == f"bakery {__version__}\n"


def test_completion_comes_from_typer(tmp_path: Path) -> None:
    r = invoke("--help")
    assert "--install-completion" in r.stdout and "--show-completion" in r.stdout
    script = PROJECT / "src"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bakery.cli.start import main; sys.argv[0] = 'bakery'; main()",
        ],
        env={
            **os.environ,
            "PYTHONPATH": str(script),
            "_BAKERY_COMPLETE": "complete_bash",
            "COMP_WORDS": "bakery ref",
            "COMP_CWORD": "1",
        },
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert p.stdout.split() == ["refresh"], (p.stdout, p.stderr)


def test_every_option_has_help_and_a_real_metavar() -> None:
    import typer

    from bakery.cli.app import app

    group = typer.main.get_command(app)
    assert isinstance(group, parsing.BakeryGroup)
    for name, command in group.commands.items():
        for p in command.params:
            if p.param_type_name == "option":
                assert getattr(p, "help", None), f"{name} {p.opts} has no help"
        text = invoke(name, "-h", columns=120).stdout
        # typer's stand-ins for a metavar: <str>, <path>, <int range>, {SERIES}
        assert not re.search(r"<(str|path|int|integer|text|float)\b[^>]*>|\{", text), text


@pytest.mark.parametrize(
    "args",
    [
        ("apply", "--bogus"),
        ("apply",),
        ("apply", "demo", "--fuzz", "9"),
        ("matrix", "demo", "--jobs", "0"),
        ("nosuchcommand",),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: tuple[str, ...], tmp_path: Path) -> None:
    p = run_bakery(*args, cwd=tmp_path)
    assert p.returncode == 2
    assert p.stdout == ""
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr


def test_quiet_may_follow_the_command(cli: Cli, tiny: Tiny) -> None:
    assert parsing.hoist_globals(["apply", "x", "-q"]) == ["-q", "apply", "x"]
    assert parsing.hoist_globals(["verify", "-v"]) == ["verify", "-v"]  # pytest's -v
    assert parsing.hoist_globals(["apply", "x", "--", "-q"]) == ["apply", "x", "--", "-q"]


# --- exit codes -------------------------------------------------------------------------------


def test_summarize_counts_a_passing_check_as_a_pass(cli: Cli, tiny: Tiny) -> None:
    assert cli("check", "demo", "--vllm", tiny.src, "--json", "c.json").exit_code == 0
    r = cli("summarize", "c.json")
    assert r.exit_code == 0, r.output
    assert "✅ checked" in r.stdout


def test_spread_takes_several_values_after_one_option() -> None:
    takes = {"--vllm", "--jobs", "-j", "--out"}
    assert parsing.spread(["s", "--vllm", "a", "b", "-j", "2"], "--vllm", takes) == [
        "s",
        "--vllm",
        "a",
        "--vllm",
        "b",
        "-j",
        "2",
    ]
    # SERIES after the list: the last word is the series
    assert parsing.spread(["--vllm", "a", "b", "s"], "--vllm", takes) == [
        "s",
        "--vllm",
        "a",
        "--vllm",
        "b",
    ]
    # an option's value is never taken for a version
    assert parsing.spread(["--out", "o", "--vllm", "a", "s"], "--vllm", takes) == [
        "s",
        "--out",
        "o",
        "--vllm",
        "a",
    ]
    assert parsing.spread(["s", "--vllm", "a", "--", "b"], "--vllm", takes) == [
        "s",
        "--vllm",
        "a",
        "--",
        "b",
    ]


def test_matrix_takes_several_releases_after_one_vllm(cli: Cli, home: Path) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.2.0", {"vllm/mod.py": BASE})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    r = cli("matrix", "s", "--vllm", "1.0.0", "1.2", "--json", "m.json", "-j", "1")
    assert r.exit_code == 0, r.output
    assert [x["version"] for x in json.loads(Path("m.json").read_text())["releases"]] == [
        "1.0.0",
        "1.2.0",
    ]


def test_verify_gives_the_words_after_double_dash_to_pytest(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bakery.commands import verify as bake
    from bakery.errors import VerifyError

    seen: dict[str, object] = {}

    def fake_verify(ctx: object, series: str | None, **kw: object) -> None:  # the CLI alone
        seen.update(series=series, **kw)
        raise VerifyError("stop here")

    monkeypatch.setattr(bake, "verify", fake_verify)
    r = cli("verify", "--tree", "T", "--interpret", "--", "-k", "test_x", "-x")
    assert r.exit_code == 2
    # no series named: the command layer takes the one the tree was baked from
    options: Any = seen["options"]
    assert seen["series"] is None and options.pytest_args == ("-k", "test_x", "-x")
    assert seen["tree"] == Path("T") and options.interpret is True
    cli("verify", "s", "--tree", "T", "--", "tests/x.py")
    assert seen["series"] == "s" and seen["options"].pytest_args == ("tests/x.py",)  # type: ignore[attr-defined]


def test_ctrl_c_says_it_was_interrupted(
    cli: Cli, tiny: Tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bakery.commands import apply as bake

    def interrupted(*a: object, **kw: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(bake, "apply", interrupted)
    r = cli("apply", "demo", "--vllm", tiny.src)
    assert r.exit_code == 130 and r.stderr == "interrupted\n"


# --- next steps -------------------------------------------------------------------------------


def test_hints_are_whole_commands(cli: Cli, tiny: Tiny) -> None:
    break_hunk(tiny)
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "o", "--no-port")
    assert r.exit_code == 1
    assert f"bakery apply demo --vllm {tiny.src} --no-port --out o --keep-failed" in r.stdout
    r = cli("check", "demo", "--vllm", tiny.src)
    assert f"bakery apply demo --vllm {tiny.src} --keep-failed" in r.stdout
    r = cli("apply", "demo", "--vllm", tiny.src, "--out", "o", "--keep-failed")
    assert r.exit_code == 1
    assert "bakery refresh demo --tree o.failed" in r.stdout
    assert "attempt written to o.failed, stopped at 01-kernel.diff" in r.stdout
    assert "--keep-failed" not in r.stdout.split("next:")[1]
    assert "git -C o.failed status" in r.stdout


def test_outside_a_project_bakery_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    away = tmp_path / "away"
    away.mkdir()
    env = {"BAKERY_HOME": ""}
    p = run_bakery("apply", "dcp2", cwd=away, env=env)
    assert p.returncode == 2
    assert f"no launcher/ folder in {away} or above it" in p.stderr
    assert "BAKERY_HOME" in p.stderr
    p = run_bakery("list", cwd=away, env={"BAKERY_HOME": str(away)})
    assert p.returncode == 2 and f"BAKERY_HOME={away} has no launcher/ folder" in p.stderr
    assert "$BAKERY_HOME when set" in " ".join(invoke("--help", columns=300).stdout.split())


# --- versions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "spelled"),
    [
        ("0.32", "0.32.0"),
        ("v0.32.0", "0.32.0"),
        ("0.32.0", "0.32.0"),
        ("V0.11rc1", "0.11.0rc1"),
        ("0.9.2.post1", "0.9.2.post1"),
        ("./0.32", "./0.32"),
        ("latest", "latest"),
    ],
)
def test_versions_are_normalised(typed: str, spelled: str) -> None:
    assert versions.normalize(typed) == spelled


def test_a_short_version_bakes_the_cached_release(cli: Cli, home: Path, tmp_path: Path) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    r = cli("apply", "s", "--vllm", "v1.0", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["vllm"]["version"] == "1.0.0"
    assert (home / "build" / "s-1.0.0").is_dir()


def listed(index: Index, names: list[str]) -> None:
    """The index lists these sdists (their bytes are never fetched)."""
    for name in names:
        index.add(name, b"")


def test_releases_gives_ci_its_matrix(cli: Cli, index: Index) -> None:
    listed(
        index,
        [
            "vllm-1.9.0.tar.gz",
            "vllm-1.10.0.tar.gz",
            "vllm-1.10.1rc1.tar.gz",
            "vllm-1.8.0.tar.gz",
            "vllm-1.10.0-py3-none-any.whl",
        ],
    )
    r = cli("releases", "--since", "v1.9", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == ["1.9.0", "1.10.0"]
    r = cli("releases", "--since", "1.9", "--pre", "--json")
    assert json.loads(r.stdout) == ["1.9.0", "1.10.0", "1.10.1rc1"]
    assert cli("releases").stdout.split() == ["1.8.0", "1.9.0", "1.10.0"]
    r = cli("releases", "--since", "nonsense")
    assert r.exit_code == 2 and "not a release version" in r.stderr


def test_vllm_latest_is_the_newest_final_release(
    cli: Cli, index: Index, home: Path, tmp_path: Path
) -> None:
    listed(index, ["vllm-1.0.0.tar.gz", "vllm-1.1.0.tar.gz", "vllm-1.2.0rc1.tar.gz"])
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    r = cli("check", "s", "--vllm", "latest", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r.json").read_text())["vllm"]["version"] == "1.1.0"


# --- permissions and progress -----------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_baked_trees_follow_the_umask(cli: Cli, tiny: Tiny, tmp_path: Path, mask: int) -> None:
    old = os.umask(mask)
    try:
        assert cli("apply", "demo", "--vllm", tiny.src, "--out", "out").exit_code == 0
        break_hunk(tiny)
        assert (
            cli("apply", "demo", "--vllm", tiny.src, "--out", "f", "--keep-failed").exit_code == 1
        )
    finally:
        os.umask(old)
    for tree in ("out", "f.failed"):
        assert stat.S_IMODE((tmp_path / tree).stat().st_mode) == 0o777 & ~mask, tree


def test_downloads_without_a_terminal_print_a_line_every_few_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=False, width=200)
    clock = [100.0]
    monkeypatch.setattr(render.time, "monotonic", lambda: clock[0])
    update = render.download_progress(console)
    mb = 1_000_000
    for second in range(0, 13):
        clock[0] = 100.0 + second
        update(second * 10 * mb, 200 * mb)
    clock[0] = 114.0
    update(200 * mb, 200 * mb)
    lines = buf.getvalue().splitlines()
    assert lines == [
        "downloading: 0.0 MB of 200.0 MB (0%), 0.0 MB/s",
        "downloading: 50.0 MB of 200.0 MB (25%), 10.0 MB/s",
        "downloading: 100.0 MB of 200.0 MB (50%), 10.0 MB/s",
        "downloading: 200.0 MB of 200.0 MB (100%), 14.3 MB/s",
    ]
