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

import re
from urllib.parse import unquote

# scheme://userinfo@  (userinfo: anything up to the first / ? # or whitespace, ending in @)
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^/?#\s@]*)@")
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&;](?:[A-Za-z0-9_\-]*(?:token|key|secret|password|passwd|sig|signature|auth)"
    r"[A-Za-z0-9_\-]*)=)(?P<value>[^&#\s]*)",
    re.IGNORECASE,
)
_AUTHORITY = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<netloc>[^/?#]*)")

MASK = "***"


def redact_text(text: str, *urls: str) -> str:
    """text with the credentials of every URL in it masked, and the passwords (or lone
    tokens) of urls, four characters or more, hidden wherever they appear."""
    for url in urls:
        _, auth = split_userinfo(url)
        if auth is None:
            continue
        for secret in (auth[1], auth[0] if not auth[1] else ""):
            if len(secret) >= 4:  # shorter strings would hide unrelated text
                text = text.replace(secret, MASK)
    if "://" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return _SECRET_QUERY.sub(lambda m: f"{m['key']}{MASK}", text)


def redact(url: str) -> str:
    """One URL with its credentials masked (the same rule as redact_text)."""
    return redact_text(url)


#: The name the package-index code uses (pip's ``redact_auth_from_url``): the same rule.
redact_url = redact


def has_credentials(url: str) -> bool:
    return redact_text(url) != url


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without its userinfo, (user, password) or None). A lone token
    (``https://TOKEN@host``) is the user, with an empty password."""
    m = _AUTHORITY.match(url)
    if m is None or "@" not in m["netloc"]:
        return url, None
    userinfo, _, host = m["netloc"].rpartition("@")
    user, _, password = userinfo.partition(":")
    return f"{m['scheme']}{host}{url[m.end() :]}", (unquote(user), unquote(password))
