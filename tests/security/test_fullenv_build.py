"""Building the full test environment runs no code from the index, and its password
never reaches an argv (issue 46: "Building the full environment runs code from the
index", "The index password is in pip's argv").

A real installer (pip, or uv where installed) against a local index behind a user and
password: a wheel is installed with the password delivered (the index sees it) while no
argv of the installer holds it; an sdist whose in-tree PEP 517 backend (it needs nothing
from the index, so any installer that builds sdists would run it) would leave a file is
never built: the build fails in one line, and the file is never made.
"""

from __future__ import annotations

import base64
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bakery.errors import VerifyError
from bakery.sources.cache import Cache
from bakery.verifying import fullenv
from tests.support.archives import pure_wheel
from tests.support.index import Server, serve
from tests.support.trees import write_files

USER, SECRET = "builder", "S3cretPW-in-pipconf"


def hostile_sdist(name: str, version: str, marker: Path) -> tuple[str, bytes]:
    """An sdist whose in-tree build backend writes marker when it is imported."""
    top = f"{name}-{version}"
    backend = (
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('backend ran')\n"
        "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
        "def prepare_metadata_for_build_wheel(d, config_settings=None):\n    raise SystemExit(1)\n"
        "def build_wheel(d, config_settings=None, metadata_directory=None):\n"
        "    raise SystemExit(1)\n"
    )
    members = {
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{top}/pyproject.toml": (
            '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        ),
        f"{top}/backend.py": backend,
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rel, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return f"{top}.tar.gz", buf.getvalue()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """A local index; bakery's index URL carries a user and password."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    with serve(tmp_path / "site") as srv:
        port = srv.url.rsplit(":", 1)[1]
        monkeypatch.setenv("BAKERY_INDEX_URL", f"http://{USER}:{SECRET}@127.0.0.1:{port}/simple")
        yield srv


@pytest.fixture
def argvs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The argv of every child fullenv starts (through bakery.process, the one door; the
    real door starts it)."""
    from bakery import process

    seen: list[list[str]] = []
    real = process.start

    def spy(command: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append([str(c) for c in command])
        return real(command, *args, **kwargs)

    monkeypatch.setattr(process, "start", spy)
    return seen


@pytest.mark.parametrize("where", ["BAKERY_INDEX_URL", "pip.conf"])
def test_the_password_reaches_the_index_but_no_argv(
    tmp_path: Path,
    site: Server,
    argvs: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    if where == "pip.conf":  # the index as pip's configuration names it, password and all
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nindex-url = {os.environ['BAKERY_INDEX_URL']}\n")
        monkeypatch.delenv("BAKERY_INDEX_URL")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    name, data = pure_wheel("bakery_test_ok", "1.0", "VALUE = 1\n")
    site.index([site.add(name, data)], project="bakery-test-ok")
    tree = write_files(tmp_path / "tree", {"requirements/common.txt": "bakery-test-ok\n"})
    found = fullenv.ensure(tree, cpu=False, cache=Cache(tmp_path / "cache"))
    assert found.meta["installed"] == ["bakery-test-ok==1.0"]
    (install,) = [a for a in argvs if "install" in a]
    assert not [a for a in install if SECRET in a or USER in a]
    assert "--only-binary" in install and ":all:" in install
    basic = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()
    assert any(f"Basic {basic}" in line for line in site.seen)  # delivered, by the environment
    log = (found.path / "bakery-install.log").read_text()
    assert SECRET not in log


def test_an_sdist_from_the_index_is_never_built(
    tmp_path: Path, site: Server, argvs: list[list[str]]
) -> None:
    ran = tmp_path / "backend-ran"
    name, data = hostile_sdist("bakery_test_evil", "1.0", ran)
    site.index([site.add(name, data)], project="bakery-test-evil")
    tree = write_files(tmp_path / "tree", {"requirements/common.txt": "bakery-test-evil\n"})
    cache = Cache(tmp_path / "cache")
    with pytest.raises(VerifyError, match="could not be installed: .*bakery-test-evil") as err:
        fullenv.ensure(tree, cpu=False, cache=cache)
    assert "\n" not in str(err.value) and SECRET not in str(err.value)
    assert not ran.exists()
    assert [p.name for p in (cache.root / "envs").iterdir()] == []
    assert site.seen and not [line for line in site.seen if "/files/" in line]  # not fetched


def test_an_unreachable_index_fails_in_one_line_without_its_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argvs: list[list[str]]
) -> None:
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("BAKERY_INDEX_URL", f"http://{USER}:{SECRET}@127.0.0.1:9/simple")
    tree = write_files(tmp_path / "tree", {"requirements/common.txt": "bakery-test-ok\n"})
    with pytest.raises(VerifyError, match="could not be installed") as err:
        fullenv.ensure(tree, cpu=False, cache=Cache(tmp_path / "cache"))
    assert SECRET not in str(err.value) and "\n" not in str(err.value)
    assert not [a for a in argvs for part in a if SECRET in part]
