"""The contract's checks of what the CLI says: a refusal is exit 2 and one error line,
never a traceback."""

from __future__ import annotations

from click.testing import Result


def refused(r: Result, *words: str) -> str:
    """The contract's refusal: exit 2, one error line naming words, no traceback."""
    assert r.exit_code == 2, r.output
    err = r.stderr
    assert "Traceback" not in r.output, r.output
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, err  # progress lines ("Applying ...") may come before it
    for w in words:
        assert w in errors[0], (w, err)
    return errors[0]
