"""Reading a package index: its project pages in either format of the simple API, JSON
(PEP 691) or HTML (PEP 503), and its files, with the credentials pip would use.

The format is negotiated the way pip asks (``Accept`` names JSON first, HTML after) and
read by the answer's ``Content-Type``. A ``file://`` index is a folder of
``PROJECT/index.html`` pages, as pip reads it. File URLs may be relative: they are resolved against
the page's URL (after redirects; an HTML ``<base href>`` counts). HTML gives a file's
sha256 in the URL's fragment (``#sha256=...``).

HTTPS is checked against pip's ``cert`` (``PIP_CERT`` or pip.conf) where one is set.
Credentials come from the index URL's userinfo (for that host only) or from netrc
(``NETRC``, else ``~/.netrc``), by host, as pip and requests take them. They are sent
as an ``Authorization`` header that never follows a redirect to another host, and never
appear in a message (bakery.safety.urls).

The index is not trusted beyond the hash it gives (bounded.py): an answer is read up to
``limits.MAX_INDEX_ANSWER``; one of the wrong shape, or nested too deeply, is one line;
a link of another scheme than http(s) from an http(s) index (``file://`` would read the
local disk) is refused; a download is bounded by the size the index states.

urllib and html.parser (the standard library) are used rather than requests: bakery makes
two GETs per release and pulls no HTTP stack into every start for them.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from html.parser import HTMLParser
from typing import IO, Any
from urllib.parse import urldefrag, urljoin, urlsplit

from bakery.errors import SourceError
from bakery.safety import limits
from bakery.safety.urls import redact_text, redact_url, split_userinfo
from bakery.sources import bounded
from bakery.sources.bounded import IndexFile
from bakery.sources.pipconf import IndexSetting, configured_cert, configured_index

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
#: pip's own Accept header for project pages.
ACCEPT = f"{JSON_TYPE}, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"


class Session:
    """Requests to one index and the hosts its files are on."""

    def __init__(self, setting: IndexSetting | None = None) -> None:
        self.setting = setting or configured_index()
        self.url, auth = split_userinfo(self.setting.url)
        self._auth = {urlsplit(self.url).netloc.lower(): auth} if auth else {}
        self._netrc: Any = None
        self._handlers: list[urllib.request.BaseHandler] = [_Redirect(self)]
        cert = configured_cert()
        if cert:
            self._handlers.append(urllib.request.HTTPSHandler(context=_ssl_context(cert)))

    @property
    def shown(self) -> str:
        """The index for messages: URL (credentials hidden) and where it was set."""
        return f"{redact_url(self.setting.url)} (from {self.setting.origin})"

    def credentials(self, url: str) -> tuple[str, str] | None:
        parts = urlsplit(url)
        if parts.netloc.lower() in self._auth:
            return self._auth[parts.netloc.lower()]
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
        found = self._netrc_file()
        entry = found.authenticators(parts.hostname) if found is not None else None
        if entry is None:
            return None
        login, _account, password = entry
        return login or "", password or ""

    def _netrc_file(self) -> Any:
        import netrc

        if self._netrc is None:
            path = os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
            try:
                self._netrc = netrc.netrc(path)
            except OSError:
                self._netrc = False
            except netrc.NetrcParseError as e:
                # Not e.msg: it quotes the token it choked on, which may be a password.
                where = f"netrc {e.filename}"
                raise SourceError(f"{where}: cannot parse it (near line {e.lineno})") from None
        return self._netrc or None

    def authorize(self, req: urllib.request.Request) -> None:
        auth = self.credentials(req.full_url)
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            # unredirected: urllib does not copy it onto a redirect (see _Redirect).
            req.add_unredirected_header("Authorization", f"Basic {token}")

    def open(
        self, url: str, *, accept: str | None = None, timeout: float = limits.NET_TIMEOUT
    ) -> IO[bytes]:
        """GET url (credentials in its userinfo are taken out and sent as a header)."""
        bare, auth = split_userinfo(url)
        # An http(s) index may not send bakery to a local file (file://) or elsewhere.
        allowed = ("http", "https", "file") if self.url.startswith("file:") else ("http", "https")
        scheme = urlsplit(bare).scheme.lower()
        if scheme not in allowed:
            raise SourceError(
                f"{redact_url(url)[:200]}: not an http(s) URL (the index is {redact_url(self.url)})"
            )
        if auth is not None:
            self._auth.setdefault(urlsplit(bare).netloc.lower(), auth)
        req = urllib.request.Request(bare, headers={"Accept": accept} if accept else {})
        self.authorize(req)
        opener = urllib.request.build_opener(*self._handlers)
        response: IO[bytes] = opener.open(req, timeout=timeout)
        return response

    def error(self, url: str, e: BaseException) -> SourceError:
        reason = getattr(e, "reason", None) or e
        if isinstance(e, urllib.error.HTTPError):
            reason = f"HTTP {e.code} {e.reason}"
        text = f"cannot read {redact_url(url)} on the package index {self.shown}: {reason}"
        return SourceError(redact_text(text, self.setting.url, url))

    def project_files(self, project: str) -> list[IndexFile]:
        """The files of a project's page, in the page's order."""
        url = f"{self.url.rstrip('/')}/{project}/"
        if urlsplit(url).scheme == "file":  # a folder of pages, as pip reads it
            url = urljoin(url, "index.html")
        try:
            with self.open(url, accept=ACCEPT) as resp:
                body = bounded.read_bounded(resp, limits.MAX_INDEX_ANSWER, url)
                page = resp.geturl()  # type: ignore[attr-defined]
                ctype = resp.headers.get_content_type()  # type: ignore[attr-defined]
                charset = resp.headers.get_content_charset() or "utf-8"  # type: ignore[attr-defined]
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise self.error(url, e) from None
        try:
            if ctype == JSON_TYPE:
                return parse_json(body, page)
            if ctype in HTML_TYPES:
                return parse_html(body.decode(charset, errors="replace"), page)
        except RecursionError:
            raise SourceError(
                f"{redact_url(page)}: the index's answer is nested too deeply"
            ) from None
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SourceError(f"{redact_url(page)}: not a simple-API page ({e})") from None
        raise SourceError(
            f"{redact_url(page)}: the index answered {ctype}, neither JSON (PEP 691) "
            "nor HTML (PEP 503)"
        )


def _ssl_context(cert: str) -> ssl.SSLContext:
    """pip's ``cert``: this CA bundle instead of the system's."""
    try:
        return ssl.create_default_context(cafile=cert)
    except (OSError, ssl.SSLError) as e:
        raise SourceError(f"pip's cert {cert}: {getattr(e, 'strerror', None) or e}") from None


class _Redirect(urllib.request.HTTPRedirectHandler):
    """Redirects get the credentials of their own host, never those of the last one."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            self.session.authorize(new)
        return new


def parse_json(body: bytes, page: str) -> list[IndexFile]:
    """A PEP 691 project page, each file checked for shape (bounded.checked_files);
    relative URLs resolved against page."""
    return bounded.checked_files(json.loads(body), page)


class _Anchors(HTMLParser):
    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base = page
        self.anchors: list[tuple[str, dict[str, str | None], list[str]]] = []
        self._text: list[str] | None = None
        self._seen_base = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag == "base" and not self._seen_base and attr.get("href"):
            self.base, self._seen_base = urljoin(self.base, attr["href"] or ""), True
        elif tag == "a" and attr.get("href"):
            self._text = []
            raw = attr["href"] or ""
            # a URL with a control character is kept as it is: refused when it is used
            href = raw if bounded.unsafe_url(raw) else urljoin(self.base, raw)
            self.anchors.append((href, attr, self._text))

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._text = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


def parse_html(text: str, page: str) -> list[IndexFile]:
    """A PEP 503 project page: one anchor per file, its text the filename, the hash in the
    URL's fragment; relative URLs resolved against page (or its <base href>)."""
    parser = _Anchors(page)
    parser.feed(text)
    parser.close()
    out = []
    for href, attr, text_parts in parser.anchors:
        url, fragment = urldefrag(href)
        name, _, value = fragment.partition("=")
        filename = "".join(text_parts).strip() or urlsplit(url).path.rsplit("/", 1)[-1]
        out.append(
            IndexFile(
                filename,
                url,
                value.lower() if name == "sha256" and value else None,
                None,
                "data-yanked" in attr,
            )
        )
    return out
