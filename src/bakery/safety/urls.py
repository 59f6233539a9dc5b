"""The one URL redaction: credentials never reach a commit message, a manifest, a report,
a log or an error line.

``redact(url)`` drops the userinfo of a URL (``https://user:TOKEN@host/x`` becomes
``https://***@host/x``) and the values of query parameters that look like secrets;
``redact_text(text)`` does the same to every URL inside free text (git's and urllib's
error messages quote the URL they were given). Hand-written rather than urllib.parse: a
URL with a broken port or bracket must still be redacted, not raise.
"""

from __future__ import annotations

import re

# scheme://userinfo@  (userinfo: anything up to the first / ? # or whitespace, ending in @)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/?#\s@]*)@")
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:[A-Za-z0-9_\-]*(?:token|key|secret|password|passwd|sig|signature|auth)"
    r"[A-Za-z0-9_\-]*)=)(?P<value>[^&#\s]*)",
    re.IGNORECASE,
)

MASK = "***"


def redact_text(text: str) -> str:
    """text with the credentials of every URL in it masked."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['key']}{MASK}", text)


def redact(url: str) -> str:
    """One URL with its credentials masked (the same rule as redact_text)."""
    return redact_text(url)


def has_credentials(url: str) -> bool:
    return redact_text(url) != url
