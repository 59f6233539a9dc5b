"""The one sanitiser for text taken from input (diff names, series.toml fields, index
fields, report fields) before bakery prints it or writes it into a report for people.

- ``clean(text)``: control characters (C0, DEL, C1), lone surrogates (undecodable file
  names) and line breaks become visible escapes (``\\x1b``, ``\\n``), so no input can
  start a line of its own, colour a terminal, or break an XML file.
- ``CILineGuard``: the stream every console writes through; a printed line that would
  start with ``::`` (a GitHub Actions workflow command, perhaps after spaces) gets a
  zero-width-free visible guard ``\\::`` instead. This is the only place that sees whole
  lines after rich has laid out tables, so no cell or wrap can slip past it.
- ``md_cell(text)``: clean(), then ``|``, ``<``, ``>``, ``&``, backticks and line starts
  escaped for a Markdown table cell (GitHub renders HTML in Markdown).
- JUnit XML: ElementTree escapes ``<&"``; clean() removes what XML 1.0 cannot hold.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO, Any

_BAD = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_WORKFLOW = re.compile(r"^(\s*)::", re.MULTILINE)


def _escape(m: re.Match[str]) -> str:
    c = m.group(0)
    if c == "\n":
        return "\\n"
    if c == "\r":
        return "\\r"
    if c == "\t":
        return "\\t"
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean(text: object) -> str:
    """str(text) on one line, with nothing a terminal or an XML parser would act on."""
    s = str(text)
    s = _BAD.sub(_escape, s)
    return guard_lines(s)


def guard_lines(text: str) -> str:
    """Every line that would start with ``::`` (after blanks) starts with ``\\::``."""
    return _WORKFLOW.sub(lambda m: f"{m.group(1)}\\::", text) if "::" in text else text


def md_cell(text: object) -> str:
    s = clean(text)
    for a, b in (
        ("&", "&amp;"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("|", "\\|"),
        ("`", "\\`"),
    ):
        s = s.replace(a, b)
    return s


class CILineGuard:
    """A text stream wrapper: lines written through it never start with ``::`` (after
    blanks), however the writes cut them. Other attributes (isatty, encoding) are the
    wrapped stream's, so rich still sees the terminal it writes to."""

    def __init__(self, stream: Callable[[], IO[str]]) -> None:
        self._get = stream  # looked up at each write: tests swap sys.stdout
        self._blank = True  # the line so far is only blanks
        self._colon = False  # ... then one ':'

    def write(self, s: str) -> int:
        if ":" not in s and not self._colon:  # most writes: nothing to look at
            cut = max(s.rfind("\n"), s.rfind("\r"))
            tail = s[cut + 1 :]
            blank = not tail.strip(" \t")
            self._blank = blank if cut >= 0 else self._blank and blank
            self._get().write(s)
            return len(s)
        out: list[str] = []
        for c in s:
            if c in "\n\r":
                if self._colon:
                    out.append(":")
                self._blank, self._colon = True, False
                out.append(c)
            elif self._colon:
                out.append("\\::" if c == ":" else ":" + c)
                self._blank = self._colon = False
            elif self._blank and c == ":":
                self._colon = True  # held back until the next character says what it is
            else:
                if self._blank and c not in " \t":
                    self._blank = False
                out.append(c)
        self._get().write("".join(out))
        return len(s)

    def flush(self) -> None:
        if self._colon:  # a lone ':' at the end of what was written so far
            self._get().write(":")
            self._blank = self._colon = False
        self._get().flush()

    def __getattr__(self, item: str) -> Any:
        return getattr(self._get(), item)
