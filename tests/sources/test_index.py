"""The package index, as pip and uv find and read it.

Which index: bakery's answer is checked against pip's own (pip's ``install`` command
parses its options from the same environment and files) in every arrangement of pip's
configuration files. How it is read: a local index, served by a thread on 127.0.0.1, in
either format of the simple API (JSON, PEP 691; HTML, PEP 503), with relative file URLs,
behind basic auth (credentials in the URL or in netrc), and redirecting its files to
another host. Nothing reaches the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.errors import SourceError
from bakery.safety.urls import redact_text, redact_url, split_userinfo
from bakery.sources import pipconf
from bakery.sources.bounded import IndexFile
from bakery.sources.index import Session, parse_html, parse_json
from bakery.sources.pipconf import IndexSetting, configured_index
from tests.support.archives import sdist
from tests.support.index import LocalIndex, serve
from tests.support.series import X_PY, series

SECRET = "s3cret-Pa55"


# --- which index: pip's configuration -------------------------------------------------------


def pip_answer() -> str:
    """The index-url pip's install command ends up with, from the same environment."""
    from pip._internal.commands import create_command

    options, _ = create_command("install").parse_args([])
    return str(options.index_url).rstrip("/")


@pytest.fixture
def pip_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No index variable set; user config folders in tmp_path; global files named by
    XDG_CONFIG_DIRS (in tmp_path; pip also reads /etc/pip.conf, as bakery does)."""
    for name in (*pipconf.ENV_ORDER, "PIP_CONFIG_FILE", "PIP_CERT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "userhome" / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    return tmp_path


def conf(path: Path, section: str, url: str, key: str = "index-url") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(f"[{section}]\n{key} = {url}\n")
    return path


USER = Path("userhome/.config/pip/pip.conf")
LEGACY = Path("userhome/.pip/pip.conf")
GLOBAL = Path("xdg/pip/pip.conf")

ARRANGEMENTS: list[tuple[str, list[tuple[Path | str, str, str]], bool]] = [
    # (name, [(file, section, url)], PIP_CONFIG_FILE names env.conf)
    ("env file", [("env.conf", "global", "http://env.invalid/simple")], True),
    ("user file", [(USER, "global", "http://user.invalid/simple")], False),
    ("global file", [(GLOBAL, "global", "http://global.invalid/simple")], False),
    (
        "new user file beats legacy",
        [
            (LEGACY, "global", "http://legacy.invalid/simple"),
            (USER, "global", "http://user.invalid/simple"),
        ],
        False,
    ),
    (
        "user beats global",
        [
            (GLOBAL, "global", "http://global.invalid/simple"),
            (USER, "global", "http://user.invalid/simple"),
        ],
        False,
    ),
    (
        "[install] beats [global] of a later file",
        [
            (GLOBAL, "install", "http://install.invalid/simple"),
            (USER, "global", "http://user.invalid/simple"),
        ],
        False,
    ),
    (
        "an existing PIP_CONFIG_FILE turns the user files off",
        [
            (USER, "install", "http://user.invalid/simple"),
            ("env.conf", "global", "http://env.invalid/simple"),
        ],
        True,
    ),
    (
        "env file beats global",
        [
            (GLOBAL, "global", "http://global.invalid/simple"),
            ("env.conf", "global", "http://env.invalid/simple"),
        ],
        True,
    ),
]


@pytest.mark.parametrize(
    ("files", "use_env_file"),
    [(a[1], a[2]) for a in ARRANGEMENTS],
    ids=[a[0] for a in ARRANGEMENTS],
)
def test_index_from_pip_config_agrees_with_pip(
    pip_env: Path,
    monkeypatch: pytest.MonkeyPatch,
    files: list[tuple[Path | str, str, str]],
    use_env_file: bool,
) -> None:
    for rel, section, url in files:
        conf(pip_env / rel, section, url)
    if use_env_file:
        monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_env / "env.conf"))
    found = configured_index()
    assert found.url == pip_answer()
    assert found.origin.endswith("index-url")


def test_pip_config_file_devnull_turns_every_file_off(
    pip_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf(pip_env / USER, "global", "http://user.invalid/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert pipconf.pip_config_files() == []
    found = configured_index()
    assert found.origin == "pip's default"
    assert found.url == pip_answer()


def test_pip_names_index_url_with_underscore(
    pip_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf(pip_env / "env.conf", "global", "http://under.invalid/simple/", key="index_url")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_env / "env.conf"))
    assert configured_index().url == "http://under.invalid/simple" == pip_answer()


def test_environment_order(pip_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf(pip_env / "env.conf", "global", "http://conf.invalid/simple")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_env / "env.conf"))
    assert configured_index().origin.endswith("env.conf [global] index-url")
    for name in reversed(pipconf.ENV_ORDER):
        monkeypatch.setenv(name, f"http://{name.lower()}.invalid/simple/")
        assert configured_index() == IndexSetting(f"http://{name.lower()}.invalid/simple", name)
    # pip agrees where pip looks: PIP_INDEX_URL beats its files
    monkeypatch.delenv("BAKERY_INDEX_URL")
    assert configured_index().url == pip_answer()


def test_default_is_pips_own(pip_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pip._internal.models.index import PyPI

    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    assert configured_index() == IndexSetting(PyPI.simple_url.rstrip("/"), "pip's default")


def test_without_pip_and_configuration_one_line_says_what_to_set(
    pip_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setitem(sys.modules, "pip._internal.models.index", None)  # import fails
    with pytest.raises(SourceError) as e:
        configured_index()
    assert "BAKERY_INDEX_URL" in e.value.message and "\n" not in e.value.message


def test_broken_pip_conf_is_one_line_without_its_secret(
    pip_env: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Result], tiny_series: Path
) -> None:
    bad = pip_env / "env.conf"
    bad.write_text(f"index-url = https://me:{SECRET}@idx.invalid/simple\n")  # no section
    monkeypatch.setenv("PIP_CONFIG_FILE", str(bad))
    r = cli("apply", tiny_series, "--vllm", "1.0.0")
    assert r.exit_code == 2
    assert f"pip configuration {bad}: cannot parse line 1" in r.output
    assert SECRET not in r.output and "Traceback" not in r.output


# --- URLs with credentials ---------------------------------------------------------------------


def test_redaction() -> None:
    url = f"https://me:{SECRET}@idx.invalid/simple"
    # one redaction for every URL (bakery.safety.urls): the user name goes too
    assert redact_url(url) == "https://***@idx.invalid/simple"
    assert redact_url(f"https://{SECRET}@idx.invalid/") == "https://***@idx.invalid/"
    assert redact_url("https://idx.invalid/simple") == "https://idx.invalid/simple"
    assert split_userinfo("https://me:p%40ss@idx.invalid/s") == (
        "https://idx.invalid/s",
        ("me", "p@ss"),
    )
    assert SECRET not in redact_text(f"fatal: could not read {url} ({SECRET})", url)


# --- the pages --------------------------------------------------------------------------------

PAGE = "https://idx.invalid/simple/vllm/"


def test_json_page_relative_urls() -> None:
    body = json.dumps(
        {
            "meta": {"api-version": "1.0"},
            "files": [
                {"filename": "vllm-1.0.tar.gz", "url": "../../f/vllm-1.0.tar.gz", "hashes": {}},
                {
                    "filename": "vllm-2.0.tar.gz",
                    "url": "https://files.invalid/vllm-2.0.tar.gz",
                    "hashes": {"sha256": "AB"},
                    "yanked": "broken",
                    "size": 3,
                },
            ],
        }
    ).encode()
    a, b = parse_json(body, PAGE)
    assert (a.url, a.sha256, a.yanked) == ("https://idx.invalid/f/vllm-1.0.tar.gz", None, False)
    assert (b.url, b.sha256, b.yanked, b.size) == (
        "https://files.invalid/vllm-2.0.tar.gz",
        "ab",
        True,
        3,
    )


def test_html_page_hashes_relative_urls_base_and_yanked() -> None:
    html = (
        "<!DOCTYPE html><html><body>\n"
        '<a href="../../f/vllm-1.0.tar.gz#sha256=AA11">vllm-1.0.tar.gz</a><br/>\n'
        '<a href="/abs/vllm-2.0.tar.gz#md5=ff" data-yanked="">vllm-2.0.tar.gz</a>\n'
        '<a href="vllm-3.0.tar.gz?x=1&amp;y=2#sha256=cc">\n  vllm-3.0.tar.gz </a>\n'
        "</body></html>"
    )
    a, b, c = parse_html(html, PAGE)
    assert (a.filename, a.url, a.sha256) == (
        "vllm-1.0.tar.gz",
        "https://idx.invalid/f/vllm-1.0.tar.gz",
        "aa11",
    )
    assert (b.url, b.sha256, b.yanked) == ("https://idx.invalid/abs/vllm-2.0.tar.gz", None, True)
    assert (c.filename, c.url) == ("vllm-3.0.tar.gz", PAGE + "vllm-3.0.tar.gz?x=1&y=2")
    (d,) = parse_html(
        '<base href="https://mirror.invalid/p/"><a href="v.tar.gz">v.tar.gz</a>', PAGE
    )
    assert d.url == "https://mirror.invalid/p/v.tar.gz"


# --- a local index --------------------------------------------------------------------------


@pytest.fixture
def tiny_series(tmp_path: Path) -> Path:
    return series(tmp_path)


def baked_x(out: Path) -> str:
    return (out / "vllm" / "x.py").read_text()


@pytest.mark.parametrize("fmt", ["json", "html"])
def test_bake_from_a_local_index_in_either_format(
    fmt: str, tiny_series: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, fmt=fmt)
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert baked_x(Path("out")) == X_PY.replace("b\n", "B\n", 1)
    report = json.loads(Path("r.json").read_text())
    assert report["vllm"]["source"] == f"{idx.url.rsplit('/simple', 1)[0]}/files/vllm-1.0.0.tar.gz"
    assert report["vllm"]["sha256"] == hashlib.sha256(idx.files["vllm-1.0.0.tar.gz"]).hexdigest()


def test_file_index_is_a_folder_of_pages(
    tiny_series: Path, tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, fmt="html")
    root = tmp_path / "www"
    (root / "simple" / "vllm").mkdir(parents=True)
    (root / "simple" / "vllm" / "index.html").write_bytes(idx.page()[0])
    (root / "files").mkdir()
    (root / "files" / "vllm-1.0.0.tar.gz").write_bytes(idx.files["vllm-1.0.0.tar.gz"])
    monkeypatch.setenv("BAKERY_INDEX_URL", (root / "simple").as_uri())
    r = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out")
    assert r.exit_code == 0, r.output
    assert baked_x(Path("out")) == X_PY.replace("b\n", "B\n", 1)


@pytest.mark.parametrize("link", ["file:///etc/passwd", "ftp://127.0.0.1/vllm-1.0.0.tar.gz"])
def test_an_http_index_cannot_send_bakery_elsewhere(
    link: str, tiny_series: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": b"x"}, fmt="html")
    page = idx.page
    idx.page = lambda: (  # type: ignore[method-assign]
        page()[0].replace(b"../../files/vllm-1.0.0.tar.gz", link.encode()),
        "text/html",
    )
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0")
    assert r.exit_code == 2
    assert r.output.strip() == f"error: {link}: not an http(s) URL (the index is {idx.url})"


def test_html_yanked_release_is_not_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    from bakery.sources.resolve import release_versions

    idx = LocalIndex(
        {f"vllm-{v}.tar.gz": b"x" for v in ("1.0.0", "1.1.0", "2.0.0rc1")},
        fmt="html",
        yanked={"vllm-1.1.0.tar.gz"},
    )
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        assert [str(v) for v in release_versions()] == ["1.0.0"]
        assert [str(v) for v in release_versions(include_pre=True)] == ["1.0.0", "2.0.0rc1"]


def test_the_index_is_asked_for_json_then_html() -> None:
    from bakery.sources.index import ACCEPT

    types = [part.split(";")[0].strip() for part in ACCEPT.split(",")]
    assert types == [
        "application/vnd.pypi.simple.v1+json",
        "application/vnd.pypi.simple.v1+html",
        "text/html",
    ]


def test_a_page_in_neither_format_is_one_line(
    tiny_series: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": b"x"}, fmt="text")
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0")
    assert r.exit_code == 2
    assert "answered text/plain, neither JSON (PEP 691) nor HTML (PEP 503)" in r.output


def test_pip_index_url_is_used_and_named(
    tiny_series: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BAKERY_INDEX_URL")
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, fmt="html")
    with serve(idx):
        monkeypatch.setenv("PIP_INDEX_URL", idx.url)
        assert cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out").exit_code == 0
        r = cli("apply", tiny_series, "--vllm", "9.9.9", "--out", "out2")
    assert r.exit_code == 2
    assert f"vLLM 9.9.9 has no source distribution on {idx.url} (from PIP_INDEX_URL)" in r.output


def _netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, password: str) -> None:
    path = tmp_path / "netrc"
    path.write_text(f"machine {host}\n  login me\n  password {password}\n")
    path.chmod(0o600)
    monkeypatch.setenv("NETRC", str(path))


@pytest.mark.parametrize("where", ["url", "netrc"])
def test_basic_auth_from_url_or_netrc(
    where: str,
    tiny_series: Path,
    tmp_path: Path,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, auth=f"me:{SECRET}")
    with serve(idx):
        url = idx.url
        if where == "url":
            url = url.replace("http://", f"http://me:{SECRET}@")
        else:
            _netrc(tmp_path, monkeypatch, "127.0.0.1", SECRET)
        monkeypatch.setenv("BAKERY_INDEX_URL", url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    assert [path for _, path, _ in idx.seen] == ["/simple/vllm/", "/files/vllm-1.0.0.tar.gz"]
    assert SECRET not in r.output and SECRET not in Path("r.json").read_text()
    manifest = Path("out/.bakery/manifest.json").read_text()
    assert SECRET not in manifest


@pytest.mark.parametrize("where", ["none", "url", "netrc"])
def test_refused_credentials_are_one_line_without_the_secret(
    where: str,
    tiny_series: Path,
    tmp_path: Path,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": b"x"}, auth="me:right")
    with serve(idx):
        url = idx.url
        if where == "url":
            url = url.replace("http://", f"http://me:{SECRET}@")
        elif where == "netrc":
            _netrc(tmp_path, monkeypatch, "127.0.0.1", SECRET)
        monkeypatch.setenv("BAKERY_INDEX_URL", url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0")
    assert r.exit_code == 2
    assert "HTTP 401" in r.output and "(from BAKERY_INDEX_URL)" in r.output
    assert SECRET not in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1
    if where == "url":
        assert "http://***@127.0.0.1" in r.output


def test_credentials_do_not_follow_a_redirect_to_another_host(
    tiny_series: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, auth=f"me:{SECRET}")
    idx.redirect = True
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url.replace("http://", f"http://me:{SECRET}@"))
        r = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out")
    assert r.exit_code == 0, r.output
    hosts = [(host.split(":")[0], path, auth is not None) for host, path, auth in idx.seen]
    assert hosts == [
        ("127.0.0.1", "/simple/vllm/", True),
        ("127.0.0.1", "/files/vllm-1.0.0.tar.gz", True),
        ("localhost", "/files/vllm-1.0.0.tar.gz", False),
    ]


def test_broken_netrc_is_one_line(
    tiny_series: Path, tmp_path: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "netrc"
    bad.write_text(f"machine 127.0.0.1 login me password {SECRET} bogus\n")
    monkeypatch.setenv("NETRC", str(bad))
    idx = LocalIndex({"vllm-1.0.0.tar.gz": b"x"})
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        r = cli("apply", tiny_series, "--vllm", "1.0.0")
    assert r.exit_code == 2
    assert f"netrc {bad}: cannot parse it (near line" in r.output and SECRET not in r.output


def test_session_names_where_the_index_was_set() -> None:
    s = Session(IndexSetting(f"https://me:{SECRET}@idx.invalid/simple", "PIP_INDEX_URL"))
    assert s.shown == "https://***@idx.invalid/simple (from PIP_INDEX_URL)"
    assert s.credentials("https://idx.invalid/files/x") == ("me", SECRET)
    assert s.credentials("https://other.invalid/files/x") is None


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
        + ["-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        + ["-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test's certificate")
def test_https_index_checked_against_pips_cert(
    tiny_series: Path,
    tmp_path: Path,
    pip_env: Path,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cert, key = _self_signed(tmp_path)
    idx = LocalIndex({"vllm-1.0.0.tar.gz": sdist("1.0.0", files=3)}, tls=(cert, key))
    with serve(idx):
        monkeypatch.setenv("BAKERY_INDEX_URL", idx.url)
        refused = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "no")
        conf(pip_env / "env.conf", "global", str(cert), key="cert")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(pip_env / "env.conf"))
        assert pipconf.configured_cert() == str(cert) == pip_cert()
        r = cli("apply", tiny_series, "--vllm", "1.0.0", "--out", "out")
    assert refused.exit_code == 2 and "CERTIFICATE_VERIFY_FAILED" in refused.output
    assert len(refused.output.strip().splitlines()) == 1
    assert r.exit_code == 0, r.output


def pip_cert() -> str:
    from pip._internal.commands import create_command

    options, _ = create_command("install").parse_args([])
    return str(options.cert)


@pytest.mark.network
def test_html_and_json_pages_of_the_real_index_agree() -> None:
    """The index pip is configured with (or pip's default), read in both formats."""
    s = Session()
    url = s.url + "/vllm/"
    try:
        with s.open(url, accept="application/vnd.pypi.simple.v1+html") as resp:
            ctype = resp.headers.get_content_type()  # type: ignore[attr-defined]
            html, page = resp.read().decode(), resp.geturl()  # type: ignore[attr-defined]
        from_json = s.project_files("vllm")
    except (OSError, SourceError) as e:
        pytest.skip(f"the package index is not reachable: {e}")
    if ctype not in ("text/html", "application/vnd.pypi.simple.v1+html"):
        pytest.skip(f"this index serves no HTML ({ctype})")

    def key(f: IndexFile) -> tuple[str, str, str | None, bool]:
        return f.filename, f.url, f.sha256, f.yanked

    from_html = parse_html(html, page)
    assert len(from_html) > 100
    assert sorted(map(key, from_html)) == sorted(map(key, from_json))
