"""The rule that hides credentials in text: every URL's userinfo and secret-looking query
values masked, and the secrets of given URLs hidden wherever a message quotes them.

It sits below :mod:`bakery.errors` (every error line goes through it) and below
:mod:`bakery.safety.urls`, which offers it with the URL forms (``redact``, ``redact_url``);
it imports nothing of bakery, so the two can use it without a cycle. Hand-written rather
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


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without its userinfo, (user, password) or None). A lone token
    (``https://TOKEN@host``) is the user, with an empty password."""
    m = _AUTHORITY.match(url)
    if m is None or "@" not in m["netloc"]:
        return url, None
    userinfo, _, host = m["netloc"].rpartition("@")
    user, _, password = userinfo.partition(":")
    return f"{m['scheme']}{host}{url[m.end() :]}", (unquote(user), unquote(password))
