"""Class 3: credentials in URLs.

A token in a ``git+`` URL or in the index URL must never reach a commit message, the
manifest, the JSON report, the cache, a log or an error line. One redaction function
(bakery.safety.urls) is applied wherever a URL is written or printed, and every error
line passes through it. Sources are served on 127.0.0.1 (a dumb-HTTP git repository, a
PEP 691 index) so the success paths are exercised too, not only the failures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import Result

from bakery.safety.urls import redact, redact_text
from tests.support.archives import sdist
from tests.support.index import Server, serve
from tests.support.repos import git, git_repo
from tests.support.series import DIFF, series
from tests.support.trees import Tiny, files_under

Cli = Callable[..., Result]
TOKEN = "ghp_S3CRETt0ken"


def no_token_anywhere(*texts: str, roots: tuple[Path, ...] = ()) -> None:
    for t in texts:
        assert TOKEN not in t, t
    for root in roots:
        for p in files_under(root):
            if p.is_symlink():
                continue
            assert TOKEN.encode() not in p.read_bytes(), p


@pytest.mark.parametrize(
    "url,want",
    [
        (f"https://user:{TOKEN}@example.invalid/x.git", "https://***@example.invalid/x.git"),
        (f"https://{TOKEN}@example.invalid/x", "https://***@example.invalid/x"),
        (f"git+http://u:{TOKEN}@h:99999999/x@main", "git+http://***@h:99999999/x@main"),
        (f"https://h/simple?token={TOKEN}&x=1", "https://h/simple?token=***&x=1"),
        ("https://h/simple/", "https://h/simple/"),
    ],
)
def test_redact(url: str, want: str) -> None:
    assert redact(url) == want


def test_redact_text_finds_every_url() -> None:
    text = f"fatal: unable to access 'https://a:{TOKEN}@h/x/': and http://b:{TOKEN}@[::1/y"
    out = redact_text(text)
    assert TOKEN not in out and out.count("***@") == 2


@pytest.fixture
def git_server(tiny: Tiny, tmp_path: Path) -> Iterator[Server]:
    git_repo(tiny.src, {})
    root = tmp_path / "srv"
    root.mkdir()
    git(root, "clone", "-q", "--bare", str(tiny.src), "repo.git")
    git(root / "repo.git", "update-server-info")
    with serve(root) as srv:
        yield srv


def test_git_url_token_reaches_no_commit_manifest_report_or_cache(
    cli: Cli, git_server: Server, tmp_path: Path
) -> None:
    url = git_server.url.replace("http://", f"http://user:{TOKEN}@") + "/repo.git"
    out = tmp_path / "out"
    r = cli("apply", "demo", "--vllm", f"git+{url}@main", "--out", out, "--json", "r.json")
    assert r.exit_code == 0, r.output
    report = (tmp_path / "r.json").read_text()
    assert "***@127.0.0.1" in json.loads(report)["vllm"]["source"]
    log = git(out, "log", "--format=%B")
    no_token_anywhere(r.stdout, r.stderr, report, log, roots=(out, tmp_path / "cache"))


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_git_url_token_not_in_error_line_or_report(cli: Cli, tiny: Tiny, scheme: str) -> None:
    spec = f"git+{scheme}://user:{TOKEN}@127.0.0.1:9/x.git@main"
    r = cli("apply", "demo", "--vllm", spec, "--out", "out", "--json", "r.json")
    assert r.exit_code == 2, r.output
    assert "***@127.0.0.1" in r.stderr
    no_token_anywhere(r.stdout, r.stderr, Path("r.json").read_text())


def test_index_password_not_in_error_line(
    cli: Cli, tiny: Tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BAKERY_INDEX_URL", f"http://user:{TOKEN}@127.0.0.1:9/simple")
    r = cli("apply", "demo", "--vllm", "9.9.9", "--out", "out", "--json", "r.json")
    assert r.exit_code == 2, r.output
    no_token_anywhere(r.stdout, r.stderr, Path("r.json").read_text())


def test_index_password_not_in_manifest_report_or_cache(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve(tmp_path / "idx") as srv:
        entry = srv.add("vllm-9.9.0.tar.gz", sdist("9.9.0"))
        entry["url"] = "../../files/vllm-9.9.0.tar.gz"  # relative: resolved against the page
        srv.index([entry])
        monkeypatch.setenv(
            "BAKERY_INDEX_URL", srv.url.replace("http://", f"http://user:{TOKEN}@") + "/simple"
        )
        s = series(tmp_path, DIFF)
        r = cli("apply", s, "--vllm", "9.9.0", "--out", "out", "--json", "r.json")
    assert r.exit_code == 0, r.output
    report = Path("r.json").read_text()
    # the index's credentials go as a header to its host, never into a file's address
    source = json.loads(report)["vllm"]["source"]
    assert source.endswith("/files/vllm-9.9.0.tar.gz") and "user" not in source
    no_token_anywhere(r.stdout, r.stderr, report, roots=(tmp_path / "out", tmp_path / "cache"))
