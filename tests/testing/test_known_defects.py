"""A series' data for verify: known defects, expectations per release, proposed fixes.

The plugin runs for real (run_verify starts pytest) on a tiny series whose tests are
plain Python, against a tree that is only a ``vllm/`` folder and a bake's manifest.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bakery.commands.matrix import verify_state
from bakery.errors import SeriesError
from bakery.patch.series import fixes_for
from bakery.reports.matrix import Row, to_junit, to_markdown
from bakery.testing import expect
from tests.support.series import FEATURE_X_RULES
from tests.support.trees import write_files
from tests.support.verify import run_tests

DEFECTS = textwrap.dedent("""\
    [[defect]]
    id = "demo-off-by-one"
    summary = "adds one too many"
    input = "add(1, 1)"
    releases = ["0.30.0", "0.31.0"]
    fix = "fixes/90-off-by-one.diff"
    match = "^add is off by one"
    probe = "demo_probe:off_by_one"
    """)

EXPECTATIONS = textwrap.dedent("""\
    [release."0.30.0"]
    skips = ["test_demo.py::test_rocm*"]
    nan_rule = "drop"

    [release."0.32.0"]
    skips = []
    skips_interpret = ["test_demo.py::test_gpu_only"]
    nan_rule = "select"
    """)

#: The "baked code": add() is off by one while BROKEN.
CODE = "BROKEN = True\n\n\ndef add(a, b):\n    return a + b + (1 if BROKEN else 0)\n"
#: The defect's own input, run (known-defects.toml: probe).
PROBE = textwrap.dedent("""\
    import demo_code


    def off_by_one(ctx):
        got = demo_code.add(1, 1)
        return None if got == 2 else f"add(1, 1) == {got}"
    """)

TESTS = textwrap.dedent("""\
    import pytest
    from demo_code import add


    @pytest.mark.known_defect("demo-off-by-one")
    def test_hits_the_defect():
        assert add(1, 1) == 2, "add is off by one"


    def test_fine(release, expected):
        assert release == expected.release or release == "0.31.0"


    def test_rocm():
        pytest.skip("no ROCm here")
    """)


def make_series(root: Path, tests: str = TESTS, code: str = CODE) -> Path:
    return write_files(
        root,
        {
            "diffs/01-x.diff": "",
            "known-defects.toml": DEFECTS,
            "expectations.toml": EXPECTATIONS,
            "tests/test_demo.py": tests,
            "tests/demo_code.py": code,
            "tests/demo_probe.py": PROBE,
            "tests/pytest.ini": "[pytest]\naddopts = --strict-markers\n",
        },
    )


def make_tree(root: Path, version: str | None, diffs: tuple[str, ...] = ("01-x.diff",)) -> Path:
    files = {"vllm/__init__.py": ""}
    if version is not None:
        manifest = {"vllm": {"version": version}, "diffs": [{"name": d} for d in diffs]}
        files[".bakery/manifest.json"] = json.dumps(manifest)
    return write_files(root, files)


def verify(series: Path, tree: Path, *args: str):
    return run_tests(
        series / "tests",
        tree,
        interpret=True,
        series_dir=series,
        jobs=1,
        pytest_args=["-q", *args],
    )


# --- the data files -----------------------------------------------------------------------------


def test_defects_apply_by_release_and_fix(tmp_path: Path) -> None:
    defects = expect.load_defects(make_series(tmp_path / "s"))
    defect = defects["demo-off-by-one"]
    assert defect.releases == ("0.30.0", "0.31.0") and defect.fix_name == "90-off-by-one.diff"
    assert (defect.summary, defect.input) == ("adds one too many", "add(1, 1)")
    assert (defect.raises, defect.probe) == ("AssertionError", "demo_probe:off_by_one")
    assert expect.active(defect, expect.Bake("0.30.0", ("01-x.diff",)))
    assert not expect.active(defect, expect.Bake("0.32.0", ("01-x.diff",)))
    assert not expect.active(defect, expect.Bake("0.30.0", ("01-x.diff", "90-off-by-one.diff")))
    assert expect.active(defect, expect.Bake(None))  # a tree of unknown release


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[defect]]\nid = "a"\n', "lacks input, match, releases, summary"),
        ('[[defect]]\nid="a"\nsummary=""\ninput=""\nmatch="x"\nreleases="0.30.0"\n', "list of"),
        ('[[defect]]\nid="a"\nsummary=""\ninput=""\nmatch="x"\nreleases=[]\nwhat=1\n', "unknown"),
        ('[[defect]]\nid="a"\nsummary=""\ninput=""\nmatch="("\nreleases=[]\n', "match: "),
        ('[[defect]]\nid="a"\nsummary=""\ninput=""\nmatch=""\nreleases=[]\n', "how it shows"),
        (
            '[[defect]]\nid="a"\nsummary=""\ninput=""\nmatch="x"\nreleases=[]\nprobe="a.b"\n',
            "module:function",
        ),
        ("[[defect]\n", "known-defects.toml"),
    ],
)
def test_malformed_defects_are_refused(tmp_path: Path, text: str, message: str) -> None:
    write_files(tmp_path, {"known-defects.toml": text})
    with pytest.raises(expect.SeriesDataError, match=message):
        expect.load_defects(tmp_path)


def test_expectations_follow_the_release_of_the_bake(tmp_path: Path) -> None:
    series = make_series(tmp_path / "s")
    e30 = expect.load_expectations(series, "0.30.0", interpret=True)
    assert e30 is not None and e30.data == {"nan_rule": "drop"}
    assert e30.allows_skip("launcher/x/test_demo.py::test_rocm[1]")
    assert not e30.allows_skip("test_demo.py::test_fine")
    e31 = expect.load_expectations(series, "0.31.0", interpret=True)
    assert e31 is not None and e31.release == "0.30.0"  # the newest listed below it
    gpu = expect.load_expectations(series, "0.35.0", interpret=False)
    cpu = expect.load_expectations(series, "0.35.0", interpret=True)
    assert gpu is not None and cpu is not None and gpu.release == "0.32.0"
    assert cpu.allows_skip("test_demo.py::test_gpu_only")
    assert not gpu.allows_skip("test_demo.py::test_gpu_only")
    assert expect.load_expectations(series, "0.29.0", interpret=True) is None
    assert expect.load_expectations(series, None, interpret=True) is None


def test_fixes_take_a_release_variant(tmp_path: Path) -> None:
    series = write_files(
        tmp_path / "s",
        {
            "fixes/90-a.diff": "base",
            "fixes/91-b.diff": "base",
            "fixes/0.31.0/91-b.diff": "variant",
        },
    )
    assert fixes_for(series, "0.30.0") == [series / "fixes/90-a.diff", series / "fixes/91-b.diff"]
    assert fixes_for(series, "0.31.0")[1] == series / "fixes/0.31.0/91-b.diff"
    write_files(series, {"fixes/0.32.0/92-c.diff": "stray"})
    with pytest.raises(SeriesError, match="no fix of fixes/"):
        fixes_for(series, "0.32.0")
    with pytest.raises(SeriesError, match="offers no fixes"):
        fixes_for(tmp_path, "0.30.0")


# --- the plugin, through run_verify ---------------------------------------------------------


def test_a_known_defect_is_its_own_outcome(tmp_path: Path) -> None:
    series = make_series(tmp_path / "s")
    result = verify(series, make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 0, result
    assert result.known_defects == {"demo-off-by-one": 1}
    assert (result.passed, result.failed, result.skipped, result.xfailed) == (1, 0, 1, 0)
    assert result.expectations == "0.30.0"


def test_a_defect_that_no_longer_shows_fails_naming_the_entry(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    series = make_series(tmp_path / "s", code=CODE.replace("BROKEN = True", "BROKEN = False"))
    result = verify(series, make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 1 and result.failed == 1 and not result.known_defects
    out = capfd.readouterr().out
    assert "known defect demo-off-by-one no longer shows" in out
    assert str(series / "known-defects.toml") in out


def test_a_pass_while_the_input_still_shows_the_defect_is_another_reason(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The marked test passes, but the defect's own input still gives the wrong answer:
    the test passes for another reason (here it checks less), never "the defect is gone"."""
    tests = TESTS.replace('assert add(1, 1) == 2, "add is off by one"', "assert add(1, 1) > 0")
    result = verify(make_series(tmp_path / "s", tests), make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 1 and result.failed == 1 and not result.known_defects
    out = capfd.readouterr().out
    assert "still shows on its input (add(1, 1) == 3)" in out
    assert "passes for another reason" in out and "no longer shows" not in out


def test_another_failure_of_a_marked_test_is_a_plain_failure(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A marked test that fails without the defect's signature (an unrelated error) is
    a failure that names what happened, not the known defect."""
    tests = TESTS.replace(
        'assert add(1, 1) == 2, "add is off by one"', 'raise TypeError("unrelated")'
    )
    result = verify(make_series(tmp_path / "s", tests), make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 1 and result.failed == 1 and not result.known_defects
    out = capfd.readouterr().out
    assert "expected known defect demo-off-by-one" in out
    assert "failed otherwise: TypeError: unrelated" in out


def test_a_wrong_message_is_not_the_defect(tmp_path: Path) -> None:
    tests = TESTS.replace('"add is off by one"', '"add is off by two"')
    result = verify(make_series(tmp_path / "s", tests), make_tree(tmp_path / "t", "0.30.0"))
    assert result.failed == 1 and not result.known_defects


def test_another_exception_type_with_the_defects_text_is_not_the_defect(tmp_path: Path) -> None:
    """The signature is the type and the text: a ValueError whose message is the defect's
    text is a plain failure that names it; an AssertionError subclass is the defect."""
    other = TESTS.replace(
        'assert add(1, 1) == 2, "add is off by one"', 'raise ValueError("add is off by one")'
    )
    result = verify(make_series(tmp_path / "s", other), make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 1 and result.failed == 1 and not result.known_defects
    sub = TESTS.replace(
        'assert add(1, 1) == 2, "add is off by one"',
        'class Mine(AssertionError):\n        pass\n\n    raise Mine("add is off by one")',
    )
    result = verify(make_series(tmp_path / "s2", sub), make_tree(tmp_path / "t2", "0.30.0"))
    assert result.exit_code == 0 and result.known_defects == {"demo-off-by-one": 1}, result


class _SubAssertion(AssertionError):
    pass


class NotAssertionError(Exception):
    """A name that holds the defect's type name, of another family."""


class AssertionErrorLike(Exception):
    pass


#: (raises, match, the failing call's exception, is it the defect)
SIGNATURES = [
    ("AssertionError", "^add is off by one", AssertionError("add is off by one"), True),
    # re.search from the start: the message may go on
    ("AssertionError", "^add is off by one", AssertionError("add is off by one: 3"), True),
    # anchored: the text elsewhere in the message is not the defect
    ("AssertionError", "^add is off by one", AssertionError("so add is off by one"), False),
    # unanchored: it is
    ("AssertionError", "add is off by one", AssertionError("so add is off by one"), True),
    ("AssertionError", "^add is off by one", AssertionError("add is off by two"), False),
    # a subclass of the type is the type
    ("AssertionError", "^add is off by one", _SubAssertion("add is off by one"), True),
    # another type with the very text is not
    ("AssertionError", "^add is off by one", ValueError("add is off by one"), False),
    ("AssertionError", "^add is off by one", NotAssertionError("add is off by one"), False),
    ("AssertionError", "^add is off by one", AssertionErrorLike("add is off by one"), False),
    # a base class named in raises takes its subclasses, never its base
    ("ArithmeticError", "^boom$", ZeroDivisionError("boom"), True),
    ("ZeroDivisionError", "^boom$", ArithmeticError("boom"), False),
    # a $-anchored match: the whole message
    ("ZeroDivisionError", "^boom$", ZeroDivisionError("boom!"), False),
]


@pytest.mark.parametrize(("raises", "match", "exc", "shows"), SIGNATURES)
def test_a_defect_shows_only_with_its_type_and_anchored_text(
    raises: str, match: str, exc: BaseException, shows: bool
) -> None:
    defect = expect.Defect("d", "s", "i", ("0.30.0",), raises=raises, match=match)
    assert defect.shows_in(exc) is shows
    assert defect.signature == f"{raises} matching {match!r}"


def test_a_setup_error_is_never_the_defect(tmp_path: Path) -> None:
    tests = TESTS.replace(
        "def test_hits_the_defect():",
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup')\n\n\n"
        "@pytest.mark.known_defect('demo-off-by-one')\ndef test_hits_the_defect(broken):",
    )
    result = verify(make_series(tmp_path / "s", tests), make_tree(tmp_path / "t", "0.30.0"))
    assert result.exit_code == 1 and result.errors == 1 and not result.known_defects


def test_a_case_marks_itself_at_run_time(tmp_path: Path) -> None:
    """Only the cases whose data reach the defect carry it; the others must pass."""
    tests = textwrap.dedent("""\
        import pytest
        from demo_code import add


        @pytest.mark.parametrize("a", [0, 1, 2])
        def test_adds(a, request):
            if a == 1:
                request.applymarker(pytest.mark.known_defect("demo-off-by-one"))
            want = a + 1
            assert add(a, 1) == want or a != 1, "add is off by one"
            assert add(a, 1) - (a == 1) == want
        """)
    result = verify(make_series(tmp_path / "s", tests), make_tree(tmp_path / "t", "0.30.0"))
    # a=0 and a=2 fail: add is off by one there too, and they are not marked
    assert result.known_defects == {"demo-off-by-one": 1} and result.failed == 2


def test_a_fixed_bake_runs_the_test_as_a_test(tmp_path: Path) -> None:
    series = make_series(tmp_path / "s")
    fixed = make_tree(tmp_path / "t", "0.30.0", ("01-x.diff", "90-off-by-one.diff"))
    result = verify(series, fixed)
    assert result.exit_code == 1 and result.failed == 1 and not result.known_defects


def test_an_unexpected_skip_fails(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    series = make_series(tmp_path / "s")
    result = verify(series, make_tree(tmp_path / "t", "0.32.0"))  # 0.32.0 allows no skip
    # ... and the defect is not registered for 0.32.0: its test is a plain failure there.
    assert result.exit_code == 1 and result.unexpected_skips == 1 and result.failed == 2
    assert "unexpected skip on vLLM 0.32.0" in capfd.readouterr().out


@pytest.mark.parametrize(
    "version, message",
    [(None, "records no vLLM release"), ("0.29.0", "has no rule for vLLM 0.29.0")],
)
def test_no_release_is_one_line_or_named_rules(
    tmp_path: Path, version: str | None, message: str
) -> None:
    """Without a release the series has rules for, verify would check the tree against
    itself: refused, unless the user names the rules."""
    from bakery.errors import VerifyError

    series = make_series(tmp_path / "s")
    tree = make_tree(tmp_path / "t", version)
    with pytest.raises(VerifyError, match=message) as refused:
        verify(series, tree)
    assert "--bakery-rules" in str(refused.value) and "\n" not in str(refused.value)
    result = verify(series, tree, "--bakery-rules", "0.30.0")
    assert result.exit_code == 0 and result.known_defects == {"demo-off-by-one": 1}


def test_an_unregistered_defect_is_a_usage_error(tmp_path: Path) -> None:
    from bakery.errors import VerifyError

    series = make_series(tmp_path / "s", TESTS.replace('"demo-off-by-one"', '"nope"'))
    with pytest.raises(VerifyError, match="usage error"):
        verify(series, make_tree(tmp_path / "t", "0.30.0"))


# --- the matrix ---------------------------------------------------------------------------------


def test_the_matrix_carries_known_defects() -> None:
    assert verify_state(0, {}) == "passed"
    assert verify_state(0, {"d": 2}) == "known-defects"
    assert verify_state(1, {"d": 2}) == "failed"
    row = Row("0.30.0", "baked", verify="known-defects", known_defects={"d": 2})
    assert row.ok and row.to_json()["known_defects"] == {"d": 2}
    assert "known defects: d (2)" in to_markdown("s", [row])
    junit = to_junit("s", [row]).decode()
    assert 'name="known defect d"' in junit and "known defect d: 2 tests" in junit


# --- the data files' shape and the rules a dev tree takes, varied (issue 50) --------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("release = 1\n", r'\[release."X.Y.Z"\] tables expected'),
        ("probe = 1\n", r"\[probe.NAME\] tables expected"),
        ('[probe.x]\nfile = "a.py"\n', "expectations.toml: probe x needs one of defines"),
        # a release's skips under the interpreter and on a GPU are both read
        ('[release."0.30.0"]\nskips_gpu = 1\n', "skips_gpu"),
        ('[release."0.30.0"]\nskips_interpret = 1\n', "skips_interpret"),
    ],
)
def test_a_malformed_expectations_file_is_refused_naming_what(
    tmp_path: Path, text: str, message: str
) -> None:
    write_files(tmp_path, {"expectations.toml": text})
    with pytest.raises(expect.SeriesDataError, match=message):
        expect.check_files(tmp_path)


def test_an_expectations_file_without_release_tables_has_no_rules(tmp_path: Path) -> None:
    write_files(tmp_path, {"expectations.toml": '[probe.x]\nfile = "a.py"\ncontains = "X"\n'})
    expect.check_files(tmp_path)
    assert expect.load_expectations(tmp_path, "0.30.0", interpret=True) is None
    assert expect.rules_for(tmp_path, "0.30.0.dev0", lambda rel: b"X = 1\n") is None


@pytest.mark.parametrize(
    ("version", "has_x", "rules"),
    [
        ("0.32.0", True, "0.32.0"),  # at a listed release: that one (<=, not <)
        ("0.32.5", True, "0.32.0"),  # the newest at or below it
        ("0.31.0.dev3", True, "0.31.0"),  # none below with the features: the oldest above
        ("0.99.0", True, "0.33.0"),
        (None, True, "0.33.0"),  # no version: the newest with the features
        ("0.32.0", False, "0.30.0"),  # without the feature: the release without it
    ],
)
def test_a_dev_tree_takes_the_nearest_rules_with_its_features(
    tmp_path: Path, version: str | None, has_x: bool, rules: str
) -> None:
    write_files(tmp_path, {"expectations.toml": FEATURE_X_RULES})
    text = b"FEATURE_X = 1\n" if has_x else b"OTHER = 1\n"
    seen: list[str] = []

    def read(rel: str) -> bytes | None:
        seen.append(rel)
        return text if rel == "vllm/a.py" else None

    assert expect.rules_for(tmp_path, version, read) == rules
    assert seen == ["vllm/a.py"]


# --- what the data files say, read exactly (issue 50: the survivors of `make mutate`) ----------


GOOD_DEFECT = '[[defect]]\nid="ok"\nsummary="s"\ninput="i"\nmatch="x"\nreleases=[]\n'


@pytest.mark.parametrize("before", [0, 1, 2])
def test_a_malformed_defect_is_named_by_its_place_in_the_file(tmp_path: Path, before: int) -> None:
    good = "".join(GOOD_DEFECT.replace('"ok"', f'"ok{n}"') for n in range(before))
    write_files(tmp_path, {"known-defects.toml": good + '[[defect]]\nid = "a"\n'})
    with pytest.raises(expect.SeriesDataError, match=f": defect {before + 1} lacks input, "):
        expect.load_defects(tmp_path)


@pytest.mark.parametrize("bad", ["a b", "-lead", "x" * 101, "tab\there"])
def test_a_defect_id_that_is_no_plain_name_is_refused_saying_what_a_name_is(
    tmp_path: Path, bad: str
) -> None:
    text = GOOD_DEFECT.replace('id="ok"', f"id = {json.dumps(bad)}")
    write_files(tmp_path, {"known-defects.toml": text})
    with pytest.raises(expect.SeriesDataError) as refused:
        expect.load_defects(tmp_path)
    assert str(refused.value).endswith(
        "is not a plain name (letters, digits, '.', '_', '+', '-'; at most 100)"
    )
    assert ": defect 1: id " in str(refused.value)


@pytest.mark.parametrize(
    ("release", "listed"),
    [
        ("0.31.0", True),
        ("0.32.0.dev3", True),  # a dev release inside the range: listed
        ("0.32.0rc1", True),
        ("0.33.0.dev0", False),  # before 0.33, but a pre-release of the bound itself
        ("0.30.9", False),
        ("0.33.0", False),
    ],
)
def test_a_range_of_releases_lists_the_dev_and_pre_releases_inside_it(
    release: str, listed: bool
) -> None:
    assert expect.listed(release, [">=0.31,<0.33"]) is listed


@pytest.mark.parametrize(
    ("key", "release"), [("0.30", "0.30.0"), ("0.30.0", "0.30"), ("v0.30.0", "0.30.0")]
)
def test_a_release_takes_the_entry_of_its_own_version_however_spelled(
    tmp_path: Path, key: str, release: str
) -> None:
    write_files(
        tmp_path,
        {
            "expectations.toml": f'[release."0.29.0"]\nrule = "older"\n'
            f'[release."{key}"]\nrule = "its own"\n'
        },
    )
    found = expect.load_expectations(tmp_path, release, interpret=True)
    assert found is not None and (found.release, found.data) == (key, {"rule": "its own"})


def test_no_expectations_file_or_no_release_has_no_expectations(tmp_path: Path) -> None:
    assert expect.load_expectations(tmp_path, "0.30.0", interpret=True) is None
    write_files(tmp_path, {"expectations.toml": EXPECTATIONS})
    assert expect.load_expectations(tmp_path, None, interpret=False) is None
    found = expect.load_expectations(tmp_path, "0.30.0", interpret=False)
    assert found is not None and found.release == "0.30.0"


@pytest.mark.parametrize(
    ("files", "version", "why"),
    [
        ({}, None, None),  # no rules, no defects: nothing keyed on a release
        ({"known-defects.toml": DEFECTS}, "0.30.0", None),
        ({"known-defects.toml": DEFECTS}, None, "records no vLLM release"),
        ({"known-defects.toml": DEFECTS}, "main", "'main' is not a vLLM version"),
        ({"expectations.toml": EXPECTATIONS}, "0.29.0", "has no rule for vLLM 0.29.0"),
        ({"expectations.toml": EXPECTATIONS}, "0.31.0", None),  # the newest below: 0.30.0
    ],
    ids=["nothing", "defects", "defects-no-release", "not-a-version", "no-rule", "rule-below"],
)
def test_the_series_data_applies_only_to_a_tree_of_a_release_it_has_rules_for(
    tmp_path: Path, files: dict[str, str], version: str | None, why: str | None
) -> None:
    series = write_files(tmp_path / "s", {"diffs/01-x.diff": "", **files})
    tree = make_tree(tmp_path / "t", version)
    said = expect.no_rules(series, tree)
    if why is None:
        assert said is None
        return
    assert said is not None and said.startswith(str(tree) if version != "0.29.0" else str(series))
    assert why in said and said.endswith(
        "name the release whose rules apply (--bakery-rules RELEASE)"
    )
    # the rules named instead: the tree's own release no longer decides
    assert expect.no_rules(series, tree, "0.30.0") is None
