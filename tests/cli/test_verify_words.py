"""bakery verify's words: an option it does not know is pytest's, never the SERIES."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result


@pytest.mark.parametrize(
    ("args", "series", "pytest_args"),
    [
        (["-q", "--interpret"], None, ["-q"]),
        (["--interpret", "-q", "s"], "s", ["-q"]),
        (["-x", "s", "--tree", "T", "--", "-k", "t"], "s", ["-x", "-k", "t"]),
        (["s", "--jobs", "2"], "s", []),
    ],
)
def test_an_unknown_option_goes_to_pytest_not_to_series(
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    series: str | None,
    pytest_args: list[str],
) -> None:
    from bakery.commands import verify as bake
    from bakery.errors import VerifyError

    seen: dict[str, object] = {}

    def fake_verify(ctx: object, series: str | None, **kw: object) -> None:  # the CLI alone
        seen.update(series=series, **kw)
        raise VerifyError("stop here")

    monkeypatch.setattr(bake, "verify", fake_verify)
    r = cli("verify", *args)
    assert r.exit_code == 2 and "stop here" in r.stderr, r.output
    options = seen["options"]
    assert seen["series"] == series and list(options.pytest_args) == pytest_args  # type: ignore[attr-defined]
    if "--tree" in args:
        assert seen["tree"] == Path("T")
