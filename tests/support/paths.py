"""Where the tests find things: the project's own root (its real series), the sample
diffs, the fixtures, and the one persistent cache of the network tests."""

from __future__ import annotations

import os
from pathlib import Path

#: The project's own root (holds launcher/ and patches/); some tests need its real series.
PROJECT = Path(__file__).resolve().parents[2]
SAMPLES = PROJECT / "tests" / "samples"
FIXTURES = PROJECT / "tests" / "fixtures"
#: Read at import, before any test changes HOME (conftest imports this module).
TEST_CACHE = Path(
    os.environ.get("BAKERY_TEST_CACHE") or Path.home() / ".cache" / "bakery-tests"
).expanduser()
