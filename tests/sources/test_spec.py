"""--vllm SPEC parsed once into a source value, in the order users rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakery.errors import SourceError
from bakery.sources import spec as sources


@pytest.mark.parametrize(
    ("typed", "want"),
    [
        ("0.30", sources.Release("0.30.0")),
        ("v0.30.0", sources.Release("0.30.0")),
        ("0.11.0rc1", sources.Release("0.11.0rc1")),
        ("latest", sources.Release("latest")),
        ("git+https://h/r.git@v1", sources.Git("https://h/r.git", "v1", "https://h/r.git@v1")),
        ("git+ssh://git@h/r", sources.Git("ssh://git@h/r", "HEAD", "ssh://git@h/r")),
        ("git+file:///up@abc", sources.Git("file:///up", "abc", "file:///up@abc")),
    ],
)
def test_each_kind_of_spec(typed: str, want: sources.Source) -> None:
    assert sources.parse(typed) == want


def test_an_existing_path_wins_over_a_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "0.30.0").mkdir()
    assert sources.parse("0.30.0") == sources.Local(Path("0.30.0"))
    assert sources.parse(str(tmp_path)) == sources.Local(tmp_path)


@pytest.mark.parametrize("typed", ["", "nope", "0.30-0.32", "./missing"])
def test_anything_else_is_one_line(typed: str) -> None:
    with pytest.raises(SourceError, match="not a release version"):
        sources.parse(typed)


def test_no_module_but_spec_reads_the_git_prefix() -> None:
    """(git/remote.py reads ``git+ssh://`` as git's own transport name, not a spec.)"""
    src = Path(sources.__file__).resolve().parents[1]
    found = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if 'startswith("git+")' in p.read_text()
        and str(p.relative_to(src)) not in ("sources/spec.py", "git/remote.py")
    ]
    assert found == []
