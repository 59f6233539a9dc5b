"""Which rules a tree takes (issue 26): a pristine release its own; a tree that is none (a
dev tree, a checkout of main) the listed release its pristine code calls for, by the
series' probes; ranges of versions as keys of expectations and known defects. On the real
DSA kernel file of five releases (tests/fixtures/dsa/) and the real dcp2 data files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bakery.testing import expect, probes
from tests.support.dsa import DSA, DSA_RELEASES, cache_dsa_releases, dsa_file, dsa_series, dsa_tree
from tests.support.paths import PROJECT
from tests.support.series import FEATURE_X_RULES, make_series
from tests.support.trees import write_files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DCP2 = PROJECT / "launcher" / "dcp2"


@pytest.mark.parametrize("version", DSA_RELEASES)
def test_the_probes_find_each_releases_listed_features(version: str) -> None:
    data = tomllib.loads((DCP2 / expect.EXPECTATIONS_FILE).read_text())
    found = probes.probe(
        expect._probes(DCP2, data),
        lambda rel: dsa_file(version).encode() if rel == DSA else None,
    )
    assert found == frozenset(data["release"][version]["features"])


def _bake_dev(
    cli, tmp_path: Path, home: Path, content: str, version: str, made_on: str | None = None
) -> Path:
    """A dev tree of ``content`` baked with the dcp2 diff; ``made_on``: with the diff of
    that release's port instead (a dev tree takes no port: a tree of a later release's
    code needs the diff made for it, since the base diff's merge breaks the kernel's
    contract there, issue 45)."""
    cache_dsa_releases("0.30.0")
    if made_on is None:
        dsa_series(home, ports=False)
        name = "dsa"
    else:
        name = f"dsa-{made_on}"
        (diff,) = (PROJECT / "patches" / "dcp2" / made_on).glob("*.diff")
        toml = f'base = "{made_on}"\nroot = "vllm"\nstrip = 1\n'
        make_series(home, name, {diff.name: diff.read_bytes()}, toml)
    tree = write_files(tmp_path / f"dev-{version}", dsa_tree(content, version))
    out = tmp_path / f"out-{version}"
    r = cli("apply", name, "--vllm", tree, "--out", out)
    assert r.exit_code == 0, r.output
    return out


def test_a_dev_tree_takes_the_rules_its_code_calls_for(cli, tmp_path: Path, home: Path) -> None:
    # 0.31.0.dev0 with 0.31.0's ROCm top-k: 0.31.0's rules (NaN selected, the ROCm path),
    # not 0.30.0's, the newest release below its version
    out = _bake_dev(cli, tmp_path, home, dsa_file("0.31.0"), "0.31.0.dev0")
    bake = expect.Bake.of(out, DCP2)
    assert (bake.declared, bake.pristine, bake.release) == ("0.31.0.dev0", False, "0.31.0")
    rules = expect.load_expectations(DCP2, bake.release, interpret=True)
    assert rules is not None and rules.release == "0.31.0"
    assert rules.data["nan_rule"] == "select" and rules.data["features"] == ["rocm_topk"]
    # the known defects of 0.31.0 are this tree's too
    for defect in expect.load_defects(DCP2).values():
        assert expect.active(defect, bake) == expect.listed("0.31.0", defect.releases)
    # without probes, the version alone would give 0.30.0's rules: the wrong ones
    assert _loaded(DCP2, "0.31.0.dev0", interpret=True).release == "0.30.0"


def test_a_dev_tree_of_the_next_series_takes_the_newest_rules_it_matches(
    cli, tmp_path: Path, home: Path
) -> None:
    out = _bake_dev(
        cli, tmp_path, home, dsa_file("0.34.0") + "\n# main\n", "0.35.0.dev0", made_on="0.34.0"
    )
    assert expect.Bake.of(out, DCP2).release == "0.34.0"
    # 0.33.0's code under a 0.34.0.dev0 label: 0.33.0's rules, not 0.34.0's
    out2 = _bake_dev(cli, tmp_path, home, dsa_file("0.33.0"), "0.34.0.dev0", made_on="0.33.0")
    assert expect.Bake.of(out2, DCP2).release == "0.33.0"


def test_the_probes_read_the_pristine_files_not_the_baked_ones(
    cli, tmp_path: Path, home: Path
) -> None:
    out = _bake_dev(cli, tmp_path, home, dsa_file("0.34.0"), "0.35.0.dev0", made_on="0.34.0")
    baked = out / DSA
    baked.write_text(baked.read_text().replace("score_dtype", "scoredtype"))
    assert expect.Bake.of(out, DCP2).release == "0.34.0"


def test_a_pristine_release_keeps_its_own_rules(tmp_path: Path) -> None:
    bake = expect.Bake("0.32.0")
    assert bake.pristine and _loaded(DCP2, "0.32.0", interpret=True).release == ("0.32.0")


def test_ranges_key_expectations_and_defects(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "expectations.toml": '[release."0.34.0"]\nnan_rule = "select"\n'
            '[release.">=0.35.0.dev0,<0.36"]\nnan_rule = "next"\n',
            "known-defects.toml": '[[defect]]\nid = "d"\nsummary = "s"\ninput = "i"\n'
            'match = "^d shows"\n'
            'releases = [">=0.35.0.dev0"]\n',
        },
    )
    assert _loaded(tmp_path, "0.35.0.dev3", interpret=True).data == {"nan_rule": "next"}
    assert _loaded(tmp_path, "0.36.1", interpret=True).release == "0.34.0"
    (defect,) = expect.load_defects(tmp_path).values()
    assert expect.active(defect, expect.Bake("0.35.0rc1"))
    assert not expect.active(defect, expect.Bake("0.34.0"))


def test_a_bad_probe_is_one_line(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {"expectations.toml": '[probe.x]\nfile = "a.py"\n[release."1.0"]\nfeatures = []\n'},
    )
    with pytest.raises(expect.SeriesDataError, match="probe x needs one of defines"):
        expect.rules_for(tmp_path, "1.0.dev0", lambda rel: None)


def _loaded(series: Path, release: str, *, interpret: bool) -> expect.Expectations:
    found = expect.load_expectations(series, release, interpret=interpret)
    assert found is not None, release
    return found


@pytest.mark.parametrize(
    ("manifest", "release"),
    [
        ({"vllm": {"version": "0.32.5", "identity": {"pristine": True}}}, "0.32.5"),
        # no pristine release: the nearest listed release at or below 0.32.5 with its features
        ({"vllm": {"version": "0.32.5", "identity": {"pristine": False}}}, "0.32.0"),
        ({"vllm": {"identity": {"claims": "0.31.5", "pristine": False}}}, "0.31.0"),
        ("{not json", None),  # no readable manifest: no bake
        ({"vllm": "0.32.5"}, None),
        (None, None),
    ],
    ids=["pristine", "dev-tree", "claims-only", "malformed", "wrong-shape", "no-manifest"],
)
def test_a_bake_takes_its_own_release_or_the_nearest_rules_its_code_calls_for(
    tmp_path: Path, manifest: object, release: str | None
) -> None:
    """A pristine release keeps its own rules even where the series probes features; a
    tree that is no release takes the listed release nearest to what it declares, not the
    newest with its features (0.33.0 here); a tree without a readable manifest is no bake."""
    series = write_files(tmp_path / "s", {"expectations.toml": FEATURE_X_RULES})
    files = {"vllm/a.py": "FEATURE_X = 1\n"}
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        files[".bakery/manifest.json"] = text
    tree = write_files(tmp_path / "t", files)
    assert expect.Bake.of(tree, series).release == release
    if manifest is None or isinstance(manifest, str):
        assert expect.Bake.of(tree) == expect.Bake(None)
