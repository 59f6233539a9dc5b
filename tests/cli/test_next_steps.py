"""The next steps bakery prints can be pasted as they are: they name the series as the user
gave it (a path, for a series outside launcher/), and every failure that a command can fix
names that command (the new-user trial, finding 7)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from tests.support.releases import BASE, series
from tests.support.trees import Tiny
from tests.support.trees import cache_release as release

Cli = Callable[..., Result]


def _steps(output: str) -> list[str]:
    """The lines after the last ``next:``."""
    assert "next:" in output, output
    return [line.strip() for line in output.rsplit("next:", 1)[1].splitlines() if line.strip()]


def test_a_series_given_by_path_is_named_by_that_path_in_the_hints(
    cli: Cli, tiny: Tiny, tmp_path: Path
) -> None:
    by_name = cli("check", "demo", "--vllm", tiny.src)
    assert by_name.exit_code == 0, by_name.output
    assert "run `bakery verify demo`" in by_name.stdout
    elsewhere = tmp_path / "elsewhere" / "names"
    shutil.copytree(tiny.series, elsewhere)
    r = cli("check", elsewhere, "--vllm", tiny.src)
    assert r.exit_code == 0, r.output
    assert f"run `bakery verify {elsewhere}`" in r.stdout
    assert "bakery verify names" not in r.stdout
    # the command named works as it is (verify takes the path; no 'unknown series')
    r = cli("apply", elsewhere, "--vllm", tiny.src, "--out", "o")
    assert r.exit_code == 0 and f"run `bakery verify {elsewhere}`" in r.stdout


def test_a_conflict_on_another_release_suggests_bakery_port(cli: Cli, home: Path) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE.replace("line15\n", "fifteen\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    r = cli("check", "s", "--vllm", "1.1.0")
    assert r.exit_code == 1
    steps = _steps(r.stdout)
    assert "bakery apply s --vllm 1.1.0 --keep-failed" in steps
    assert "bakery port s --vllm 1.1.0" in steps
    # --no-port asked for the series' own diffs: no port is suggested
    r = cli("check", "s", "--vllm", "1.1.0", "--no-port")
    assert r.exit_code == 1 and "bakery port" not in r.stdout


def test_a_port_not_up_to_date_names_the_command_that_updates_it(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    release("1.0.0", {"vllm/mod.py": BASE})
    release("1.1.0", {"vllm/mod.py": BASE.replace("line13\n", "thirteen\n")})
    series(home, BASE, BASE.replace("line15\n", "FIFTEEN\n"))
    assert cli("apply", "s", "--vllm", "1.1.0", "--out", "out").exit_code == 0
    assert cli("refresh", "s", "--tree", tmp_path / "out").exit_code == 0
    r = cli("check", "s", "--vllm", "1.1.0", "--up-to-date")
    assert r.exit_code == 0 and "next:" not in r.output
    port = home / "patches/s/1.1.0/01-change.diff"
    port.write_text("--- a/mod.py\n" + port.read_text().split("\n", 1)[1])
    r = cli("check", "s", "--vllm", "1.1.0", "--up-to-date")
    assert r.exit_code == 1 and "not up to date" in r.output
    assert _steps(r.output) == ["bakery port s --update --vllm 1.1.0"]
    r = cli("check", "s", "--up-to-date")  # every port: update every port
    assert r.exit_code == 1 and _steps(r.output) == ["bakery port s --update"]
