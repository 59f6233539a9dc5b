"""bakery's typed errors. The core raises these; only the CLI turns them into exit codes.

Every error carries one line for the user; ``exit_code`` follows CONTRACT.md:
1 for "does not apply" / "a test failed", 2 for bad input or usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bakery.redaction import redact_text  # every error line: no credentials


class BakeryError(Exception):
    """Base class: one clear line, and the contract's exit code."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        message = redact_text(message)
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(BakeryError):
    """Bad arguments or options."""


class SeriesError(BakeryError):
    """An unknown series, or a series folder that breaks the naming rules."""


class DiffError(BakeryError):
    """A malformed or unsafe diff: names the diff file and the line."""

    def __init__(self, path: Path | str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line else f"{path}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


class UnsafePathError(DiffError):
    """A diff that would write outside the tree, into .git, or through a symlink."""


class SourceError(BakeryError):
    """A pristine source that cannot be read, fetched, verified or extracted."""


class VerifyError(BakeryError):
    """verify was asked to do something it cannot (no tree, no GPU, no tests)."""


class ReportedError(BakeryError):
    """A BakeryError raised after the series was read: the report (a ``BakeReport``) says
    so too, and is still written where ``--json`` asked."""

    def __init__(self, error: BakeryError, report: Any) -> None:
        super().__init__(error.message)
        self.error = error
        self.report = report
        self.exit_code = error.exit_code
