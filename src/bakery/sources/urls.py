"""URLs that may carry credentials (``https://user:token@host/simple``): they are used as
given, and shown only through :func:`redact_url` (the password, or a lone token, becomes
``***``), the way pip shows them."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit, urlunsplit


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL without its userinfo, (user, password) or None). A lone token
    (``https://TOKEN@host``) is the user, with an empty password."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=host)), (unquote(user), unquote(password))


def redact_url(url: str) -> str:
    """url with its password (or its lone token) shown as ``***``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, sep, _ = userinfo.partition(":")
    shown = f"{user}:***" if sep else "***"
    return urlunsplit(parts._replace(netloc=f"{shown}@{host}"))


def redact_text(text: str, *urls: str) -> str:
    """text (an error from git or the network) with the credentials of urls hidden."""
    for url in urls:
        _, auth = split_userinfo(url)
        if auth is None:
            continue
        text = text.replace(url, redact_url(url))
        for secret in (auth[1], auth[0] if not auth[1] else ""):
            if len(secret) >= 4:  # shorter strings would hide unrelated text
                text = text.replace(secret, "***")
    return text
