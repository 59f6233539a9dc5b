"""``port --update`` and ``port --promote`` copy and write only regular files inside the
project (issue 46).

``--update`` copied a port's other files into the new port: a ``NOTES.md`` that linked to
a user's secret became a regular file holding it, ready to commit. ``--promote`` appended
to ``PROVENANCE.md`` through a link, to a file outside the project. Now a port that is a
link out of ``patches/``, or holds a link, a FIFO or a folder, is refused before anything
is read, copied or written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from bakery.patch import provenance
from bakery.porting import update
from bakery.safety.paths import UnsafeDataError
from tests.support.cli import refused
from tests.support.series import DIFF

Cli = Callable[..., Result]
SECRET = "token=hunter2\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    f = tmp_path / "userhome" / ".secret"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(SECRET)
    return f


def _series(home: Path) -> Path:
    s = home / "launcher" / "s"
    (s / "diffs").mkdir(parents=True)
    (s / "tests").mkdir()
    (s / "series.toml").write_text('base = "1.0.0"\nstrip = 1\nroot = ""\n')
    (s / "diffs" / "01-x.diff").write_text(DIFF)
    return s


def _stale_port(home: Path) -> Path:
    """patches/s/1.1.0 made from the series, which changed since: --update has work."""
    s = _series(home)
    port = home / "patches" / "s" / "1.1.0"
    port.mkdir(parents=True)
    (port / "01-x.diff").write_text(DIFF)
    provenance.write(port, provenance.of_series(s, "port"))
    (s / "diffs" / "01-x.diff").write_text(DIFF.replace("+B", "+BB"))
    return port


def _update(cli: Cli) -> dict[str, object]:
    r = cli("port", "s", "--update", "--json", "u.json")
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    (port,) = json.loads(Path("u.json").read_text())["ports"]
    assert isinstance(port, dict)
    return port


def test_update_refuses_a_port_holding_a_link_and_copies_nothing(
    cli: Cli, home: Path, secret: Path
) -> None:
    port = _stale_port(home)
    (port / "NOTES.md").symlink_to(secret)
    before = sorted(p.name for p in port.iterdir())
    done = _update(cli)
    assert done["state"] == "cannot"
    assert "NOTES.md" in str(done["why"]) and "symlink" in str(done["why"])
    assert SECRET not in json.dumps(done)
    assert (port / "NOTES.md").is_symlink()  # left as it was: nothing replaced
    assert sorted(p.name for p in port.iterdir()) == before
    found = [p for p in home.rglob("*") if p.is_file() and not p.is_symlink()]
    assert not [p for p in found if p.read_bytes() == SECRET.encode()]
    assert not (home / "build").exists()  # refused before the scratch folder


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_update_refuses_a_port_holding_other_than_files(cli: Cli, home: Path, kind: str) -> None:
    port = _stale_port(home)
    if kind == "fifo":
        os.mkfifo(port / "NOTES.md")
    else:
        (port / "notes").mkdir()
        (port / "notes" / "a.md").write_text("kept\n")
    done = _update(cli)
    assert done["state"] == "cannot"
    assert ("a FIFO" if kind == "fifo" else "a folder") in str(done["why"])
    if kind == "folder":
        assert (port / "notes" / "a.md").read_text() == "kept\n"


def test_update_refuses_a_port_that_is_a_link_out_of_the_project(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    port = _stale_port(home)
    elsewhere = tmp_path / "elsewhere-port"
    port.rename(elsewhere)
    port.symlink_to(elsewhere)
    listing = sorted(p.name for p in elsewhere.iterdir())
    done = _update(cli)
    assert done["state"] == "cannot" and "link out of the project" in str(done["why"])
    assert sorted(p.name for p in elsewhere.iterdir()) == listing


def test_the_replace_step_never_copies_through_a_link(home: Path, secret: Path) -> None:
    """A link planted after the check (between the check and the copy) is still refused
    at the copy: the port is left as it was and no staging folder stays behind."""
    port = home / "patches" / "s" / "1.1.0"
    port.mkdir(parents=True)
    (port / "01-x.diff").write_text(DIFF)
    (port / "NOTES.md").symlink_to(secret)
    new = home / "new"
    new.mkdir()
    (new / "01-x.diff").write_text(DIFF.replace("+B", "+BB"))
    with pytest.raises(UnsafeDataError, match="symlink"):
        update._replace(port, new)
    assert (port / "01-x.diff").read_text() == DIFF and (port / "NOTES.md").is_symlink()
    assert sorted(p.name for p in port.parent.iterdir()) == ["1.1.0"]


def test_a_port_of_regular_files_passes_the_check(home: Path) -> None:
    port = _stale_port(home)
    (port / "NOTES.md").write_text("notes\n")
    update.regular_port(port, home)  # no error
    new = home / "new"
    new.mkdir()
    (new / "01-x.diff").write_text("changed\n")
    update._replace(port, new)
    assert (port / "NOTES.md").read_text() == "notes\n"
    assert (port / "01-x.diff").read_text() == "changed\n"


def _next(home: Path) -> Path:
    _series(home)
    nxt = home / "patches" / "s" / "next"
    nxt.mkdir(parents=True)
    (nxt / "01-x.diff").write_text(DIFF)
    (nxt / "PROVEN-ON.json").write_text(json.dumps({"package": {}}))
    return nxt


def test_promote_never_writes_through_a_linked_provenance(
    cli: Cli, home: Path, secret: Path
) -> None:
    nxt = _next(home)
    (nxt / "PROVENANCE.md").symlink_to(secret)
    refused(cli("port", "s", "--promote", "1.1.0"), "PROVENANCE.md", "symlink")
    assert secret.read_text() == SECRET
    assert nxt.is_dir() and not (home / "patches" / "s" / "1.1.0").exists()


def test_promote_refuses_a_next_that_is_a_link_out_of_the_project(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    nxt = _next(home)
    elsewhere = tmp_path / "elsewhere-next"
    nxt.rename(elsewhere)
    nxt.symlink_to(elsewhere)
    refused(cli("port", "s", "--promote", "1.1.0"), "link out of the project")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["01-x.diff", "PROVEN-ON.json"]


def test_the_move_writes_provenance_only_as_a_regular_file(home: Path, secret: Path) -> None:
    from bakery.commands import port_next

    nxt = _next(home)
    (nxt / "PROVENANCE.md").write_text("# made\n")
    dest = home / "patches" / "s" / "1.1.0"
    port_next._move(nxt, dest, "- promoted\n")
    assert (dest / "PROVENANCE.md").read_text() == "# made\n- promoted\n"
    # a link planted at the name after the check: refused at the write, nothing moved
    again = _next_again(home)
    (again / "PROVENANCE.md").symlink_to(secret)
    with pytest.raises(UnsafeDataError):
        port_next._move(again, home / "patches" / "s" / "1.2.0", "- promoted\n")
    assert secret.read_text() == SECRET
    assert not (home / "patches" / "s" / "1.2.0").exists()


def _next_again(home: Path) -> Path:
    nxt = home / "patches" / "s" / "next"
    nxt.mkdir(parents=True)
    (nxt / "PROVEN-ON.json").write_text(json.dumps({"package": {}}))
    return nxt
