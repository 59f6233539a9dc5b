"""The smaller things a new team's trial found in what the CLI says (finding 8): flags that
contradict each other, words, plurals and defaults in help."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.series import make_series, udiff
from tests.support.trees import Tiny, cache_release

Cli = Callable[..., Result]


@pytest.mark.parametrize("command", ["verify", "matrix", "port"])
def test_both_sides_of_interpret_gpu_are_a_usage_error(cli: Cli, tiny: Tiny, command: str) -> None:
    r = cli(command, "demo", "--vllm", tiny.src, "--interpret", "--gpu")
    assert r.exit_code == 2
    assert "--interpret and --gpu: give one of them, not both" in r.stderr
    assert "CUDA" not in r.output and len(r.stderr.splitlines()) == 1
    r = cli(command, "demo", "--vllm", tiny.src, "--gpu", "--interpret", "--no-such-option")
    assert r.exit_code == 2 and "not both" in r.stderr


def test_port_help_gives_the_device_default_every_command_gives(cli: Cli) -> None:
    helps = {c: " ".join(cli(c, "--help").stdout.split()) for c in ("port", "verify", "matrix")}
    default = "Default: a GPU when torch sees one, else the CPU."
    assert all(default in h for h in helps.values()), helps["port"]
    assert "[default: interpret]" not in helps["port"]


@pytest.mark.parametrize(("jobs", "said"), [("1", "with 1 worker\n"), ("2", "with 2 workers\n")])
def test_matrix_says_worker_in_the_singular_for_one(
    cli: Cli, tiny: Tiny, jobs: str, said: str
) -> None:
    r = cli("matrix", "demo", "--vllm", tiny.src, "--jobs", jobs)
    assert said in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (5, "just now"),
        (60 * 7 + 3, "7 min ago"),
        (3600 * 2 + 5, "2 h ago"),
        (86400 + 10, "1 day ago"),
        (86400 * 10, "10 days ago"),
    ],
)
def test_cache_list_says_minutes_not_zero_hours(seconds: int, said: str) -> None:
    from bakery.cli.cache import _ago

    assert _ago(1_000_000.0 - seconds, now=1_000_000.0) == said


def test_list_shows_the_files_as_bakery_reads_them_and_the_strip(cli: Cli, home: Path) -> None:
    make_series(
        home,
        "t",
        {
            "01-ab.diff": udiff("vllm/sampling_params.py", "x\n", "y\n", "a", "b"),
            "02-hand.diff": "--- vllm/tasks.py.orig\n+++ vllm/tasks.py\n@@ -1 +1 @@\n-a\n+b\n",
            "03-git.diff": "diff --git a/vllm/m.py b/vllm/n.py\nsimilarity index 100%\n"
            "rename from vllm/m.py\nrename to vllm/n.py\n",
        },
        toml="",
    )
    r = cli("list", "t")
    assert r.exit_code == 0, r.output
    assert "strip (detected)" in r.stdout
    files = [ln.strip() for ln in r.stdout.splitlines() if ln.startswith("    ")]
    assert files == ["vllm/sampling_params.py", "vllm/tasks.py", "vllm/n.py"]
    # --json keeps the names as the headers write them
    (row,) = json.loads(cli("list", "t", "--json").stdout)
    assert row["diffs"][0]["files"] == ["b/vllm/sampling_params.py"]


def test_refresh_from_inits_tree_says_it_ignored_an_orig_file(cli: Cli, home: Path) -> None:
    y = "".join(f"line {i}\n" for i in range(20))
    cache_release("1.0.0", {"vllm/__init__.py": "", "vllm/y.py": y})
    assert cli("init", "t", "--vllm", "1.0.0").exit_code == 0
    work = home / "work" / "t"
    (work / "vllm/y.py").write_text(y.replace("line 3\n", "line 3 (t)\n"))
    r = cli("refresh", "t", "--tree", work, "--new-diff", "one")
    assert r.exit_code == 0, r.output
    # the README's hand-made diff: cp x x.orig; edit x; the .orig stays in the tree
    (work / "vllm/y.py.orig").write_text((work / "vllm/y.py").read_text())
    (work / "vllm/y.py").write_text(y.replace("line 3\n", "line 3 (t)\n").replace("9\n", "9!\n"))
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 0, r.output
    assert "ignored vllm/y.py.orig (a *.orig or *.rej file" in " ".join(r.stderr.split())
    assert "y.py.orig" not in (home / "launcher/t/diffs/01-one.diff").read_text()
    (work / "vllm/y.py.orig").unlink()  # without a leftover: no such note
    r = cli("refresh", "t", "--tree", work)
    assert r.exit_code == 0 and "ignored" not in r.stderr
