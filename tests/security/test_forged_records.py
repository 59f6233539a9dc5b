"""Round 4, High 1: a verify record in the cache is no proof unless this machine sealed it.

``CACHE/verify/*.json`` is data (a CI cache restored from another branch, a shared
runner): a record's name is a hash of public inputs, so anyone who can write the cache can
write one. A record is believed only with its seal (an HMAC under the user's key, kept
outside the cache: bakery.safety.seal) and the full static key it was made for; anything
else is ignored, said once, and the tests run. Each case counts the runs of a test that
appends a line to a marker file: a forged green never replaces a red run.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.safety import seal
from bakery.testing import reuse
from tests.support.archives import sdist
from tests.support.index import Index
from tests.support.releases import BASE, series
from tests.support.trees import Tiny, snapshot, write_files

Cli = Callable[..., Result]


@pytest.fixture
def failing(tiny: Tiny, tmp_path: Path) -> tuple[Tiny, Path, Path]:
    """The tiny series with one failing test that leaves a line per run, baked to out."""
    runs = tmp_path / "runs.txt"
    test = (
        f"def test_red(baked_tree):\n    open({str(runs)!r}, 'a').write('ran\\n')\n    assert 0\n"
    )
    write_files(tiny.series / "tests", {"test_red.py": test})
    return tiny, runs, tmp_path / "out"


def _apply_and_fail(cli: Cli, t: tuple[Tiny, Path, Path]) -> Path:
    tiny, runs, out = t
    assert cli("apply", "demo", "--vllm", tiny.src, "--out", out).exit_code == 0
    r = cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1")
    assert r.exit_code == 1, r.output
    assert runs.read_text().count("ran") == 1
    return out


def _records() -> list[Path]:
    from bakery.sources.cache import Cache

    return sorted((Cache().root / reuse.FOLDER).glob("*.json"))


def _say_passed(record: Path) -> dict[str, object]:
    data = json.loads(record.read_text())
    data["result"]["exit_code"] = 0
    data["result"]["pytest_exit_code"] = 0
    data["result"]["counts"].update(passed=1, failed=0)
    record.write_text(json.dumps(data))
    return data


def test_a_failing_verify_edited_to_say_passed_runs_again_and_fails(
    cli: Cli, failing: tuple[Tiny, Path, Path]
) -> None:
    """The end-to-end scenario of the finding: nothing false is reported green."""
    out = _apply_and_fail(cli, failing)
    (record,) = _records()
    _say_passed(record)
    before = snapshot(out)
    r = cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1")
    assert r.exit_code == 1, r.output
    assert "reused" not in r.output
    assert failing[1].read_text().count("ran") == 2  # the tests ran again
    warnings = [ln for ln in r.output.splitlines() if "seal" in ln]
    assert len(warnings) == 1, r.output  # said once
    assert snapshot(out) == before  # the tree was not touched


def test_a_forged_record_with_the_seal_of_another_key_is_ignored(
    cli: Cli, failing: tuple[Tiny, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record sealed on another machine (a restored CI cache) proves nothing here."""
    out = _apply_and_fail(cli, failing)
    (record,) = _records()
    data = _say_passed(record)
    data.pop("seal")
    here = os.environ[seal.ENV]
    monkeypatch.setenv(seal.ENV, str(tmp_path / "other-machine"))
    data["seal"] = seal.seal_json(reuse.SEAL_KIND, data)
    monkeypatch.setenv(seal.ENV, here)
    record.write_text(json.dumps(data))
    r = cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1")
    assert r.exit_code == 1 and "reused" not in r.output, r.output
    assert failing[1].read_text().count("ran") == 2


def test_a_sealed_record_of_other_inputs_renamed_to_this_key_is_ignored(
    cli: Cli, failing: tuple[Tiny, Path, Path]
) -> None:
    """The seal covers the full static key: a genuine green record of another run (other
    pytest arguments) copied under this run's name is not this run's result."""
    runs = failing[1]
    out = _apply_and_fail(cli, failing)
    (red,) = _records()
    # a run of the same tree with other pytest arguments (the red test deselected)
    cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1", "--", "-k", "nothing")
    others = [p for p in _records() if p != red]
    assert others, "the other run was recorded"
    data = json.loads(others[0].read_text())
    assert reuse.lookup(red.parent.parent, data["static"], out) is not None  # genuine
    red.write_text(others[0].read_text())  # sealed, but for other inputs
    r = cli("verify", "demo", "--tree", out, "--interpret", "--jobs", "1")
    assert r.exit_code == 1 and "reused" not in r.output, r.output
    assert runs.read_text().count("ran") == 2


def test_a_record_sealed_here_is_reused(tmp_path: Path) -> None:
    """The promise kept: this machine's own record, untouched, is taken."""
    tree = write_files(tmp_path / "tree", {"vllm/a.py": "A = 1\n"})
    result = {"exit_code": 1}
    key = reuse.store(tmp_path / "cache", "s" * 64, tree, ["vllm.a"], result)
    found = reuse.lookup(tmp_path / "cache", "s" * 64, tree)
    assert found is not None and (found.key, found.result) == (key, result)


def test_an_unsealed_or_resealed_record_is_never_taken(tmp_path: Path) -> None:
    tree = write_files(tmp_path / "tree", {"vllm/a.py": "A = 1\n"})
    cache = tmp_path / "cache"
    reuse.store(cache, "s" * 64, tree, ["vllm.a"], {"exit_code": 1})
    (record,) = (cache / reuse.FOLDER).glob("*.json")
    data = json.loads(record.read_text())
    for forged in (
        {k: v for k, v in data.items() if k != "seal"},  # no seal
        {**data, "seal": "0" * 64},  # a made-up seal
        {**data, "result": {"exit_code": 0}},  # the result changed under the seal
        {**data, "seal": data["seal"].upper()},
    ):
        record.write_text(json.dumps(forged))
        assert reuse.lookup(cache, "s" * 64, tree) is None, forged
    record.write_text(json.dumps(data))
    assert reuse.lookup(cache, "s" * 64, tree) is not None


def test_no_trusted_key_means_no_reuse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key others can read (or a link) is not used: nothing is believed or sealed."""
    tree = write_files(tmp_path / "tree", {"vllm/a.py": "A = 1\n"})
    cache = tmp_path / "cache"
    reuse.store(cache, "s" * 64, tree, ["vllm.a"], {"exit_code": 1})
    key = seal.key_path()
    key.chmod(0o644)
    seal._keys.clear()
    assert reuse.lookup(cache, "s" * 64, tree) is None
    with pytest.raises(seal.SealUnavailable, match="read or written by others"):
        seal.key()
    key.chmod(0o600)
    seal._keys.clear()
    target = tmp_path / "elsewhere.key"
    os.replace(key, target)
    key.symlink_to(target)
    with pytest.raises(seal.SealUnavailable, match="symbolic link|Too many levels"):
        seal.key()
    seal._keys.clear()


def test_the_key_is_made_once_0600_outside_the_cache(tmp_path: Path) -> None:
    path = seal.key_path()
    assert not path.exists()
    first = seal.key()
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0
    assert not path.is_relative_to(tmp_path / "cache")
    seal._keys.clear()
    assert seal.key() == first


def test_matrix_verify_never_takes_a_forged_green_record(
    cli: Cli, index: Index, home: Path, tmp_path: Path
) -> None:
    """``matrix --verify`` consults the same records: a red row stays red."""
    index.add("vllm-1.0.0.tar.gz", sdist("1.0.0", files=2, modules={"vllm/mod.py": BASE}))
    folder = series(home, BASE, BASE.replace("line3\n", "line three\n"))
    runs = tmp_path / "runs.txt"
    test = f"def test_red():\n    open({str(runs)!r}, 'a').write('ran\\n')\n    assert 0\n"
    write_files(folder, {"tests/test_red.py": test})
    args = ("matrix", "s", "--vllm", "1.0.0", "--verify", "--interpret", "--json", "m.json")
    cli(*args)
    (row,) = json.loads(Path("m.json").read_text())["releases"]
    assert row["verify"] == "failed", row
    (record,) = _records()
    _say_passed(record)
    cli(*args)
    (row,) = json.loads(Path("m.json").read_text())["releases"]
    assert row["verify"] == "failed", row
    assert runs.read_text().count("ran") == 2


def test_port_never_says_no_port_needed_on_a_forged_green_record(
    cli: Cli, index: Index, home: Path, tmp_path: Path
) -> None:
    """``port`` consults the same records: the series' own diffs apply on the new
    release but its tests fail there; a record edited to say passed changes nothing."""
    index.add("vllm-1.0.0.tar.gz", sdist("1.0.0", files=2, modules={"vllm/mod.py": BASE}))
    index.add("vllm-1.2.0.tar.gz", sdist("1.2.0", files=3, modules={"vllm/mod.py": BASE}))
    folder = series(home, BASE, BASE.replace("line3\n", "line three\n"))
    runs = tmp_path / "runs.txt"
    test = (
        "from bakery.testing import load_tree_module\n\n\ndef test_red():\n"
        f"    open({str(runs)!r}, 'a').write('ran\\n')\n"
        "    assert not load_tree_module('vllm.pkg.m002')\n"  # only 1.2.0 has m002
    )
    write_files(folder, {"tests/test_red.py": test})
    args = ("port", "s", "--vllm", "1.2.0", "--interpret", "--json", "port.json")
    first = cli(*args)
    assert "no port needed" not in first.output, first.output
    ran = runs.read_text().count("ran")
    assert ran >= 1
    for record in _records():
        _say_passed(record)
    again = cli(*args)
    assert "no port needed" not in again.output, again.output
    assert json.loads(Path("port.json").read_text())["no_port_needed"] is False
    assert runs.read_text().count("ran") > ran  # the tests ran again
