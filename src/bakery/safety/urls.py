"""The one URL redaction: credentials never reach a commit message, a manifest, a report,
a log or an error line.

``redact(url)`` (also ``redact_url``) drops the userinfo of a URL
(``https://user:TOKEN@host/x`` becomes ``https://***@host/x``: a user name is often a
token too) and the values of query parameters that look like secrets; ``redact_text(text)``
does the same to every URL inside free text (git's and urllib's error messages quote the
URL they were given), and also hides the secrets of the URLs it is given, where a message
quotes them apart from their URL. ``split_userinfo`` takes credentials out of a URL so that
they travel as an Authorization header, never as part of an address. Hand-written rather
than urllib.parse: a URL with a broken port or bracket must still be redacted, not raise.
"""

from __future__ import annotations

from bakery.redaction import MASK, redact_text, split_userinfo

__all__ = ["MASK", "redact", "redact_text", "redact_url", "split_userinfo"]


def redact(url: str) -> str:
    """One URL with its credentials masked (the same rule as redact_text)."""
    return redact_text(url)


#: The name the package-index code uses (pip's ``redact_auth_from_url``): the same rule.
redact_url = redact
