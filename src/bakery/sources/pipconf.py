"""Which package index bakery reads: the one pip and uv would use.

In order: ``BAKERY_INDEX_URL``; ``PIP_INDEX_URL``; uv's ``UV_DEFAULT_INDEX`` and
``UV_INDEX_URL``; ``index-url`` in pip's configuration files; and last, pip's own default,
asked of pip itself (bakery names no index host of its own).

pip's configuration files are read here the way pip reads them (pip's
``configuration.py``; pip is not run, and its private configuration API is not imported:
it has changed between releases): global files (``$XDG_CONFIG_DIRS/pip/pip.conf`` then
``/etc/pip.conf``), user files (``~/.pip/pip.conf`` then ``$XDG_CONFIG_HOME/pip/pip.conf``;
skipped when ``PIP_CONFIG_FILE`` names a file that exists), the site file
(``sys.prefix/pip.conf``), then ``PIP_CONFIG_FILE``; a later file overrides an earlier one,
and ``PIP_CONFIG_FILE=/dev/null`` turns them all off. In them, ``[install]`` overrides
``[global]``, whichever file each comes from, as it does for ``pip install``. pip's
``cert`` (``PIP_CERT``) is read the same way: the CA bundle for HTTPS.
"""

from __future__ import annotations

import configparser
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bakery.errors import SourceError

#: Environment variables that name an index, first match wins.
ENV_ORDER = ("BAKERY_INDEX_URL", "PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL")
#: pip.conf sections bakery reads, the later overriding the earlier.
SECTIONS = ("global", "install")

_WINDOWS = sys.platform == "win32"
_BASENAME = "pip.ini" if _WINDOWS else "pip.conf"


@dataclass(frozen=True)
class IndexSetting:
    """The index URL (it may carry credentials: show it through urls.redact_url), or
    another setting, and where it was set (an environment variable, a file and section, or
    pip's default)."""

    url: str
    origin: str


def configured_index(environ: Mapping[str, str] | None = None) -> IndexSetting:
    env = os.environ if environ is None else environ
    for name in ENV_ORDER:
        value = env.get(name, "").strip()
        if value:
            return IndexSetting(value.rstrip("/"), name)
    found = pip_config_index(pip_config_files(env))
    return found if found is not None else pip_default_index()


def _global_dirs() -> list[Path]:
    import platformdirs

    if sys.platform == "darwin":
        return [Path(platformdirs.site_data_dir("pip", appauthor=False, multipath=True))]
    dirs = platformdirs.site_config_dir("pip", appauthor=False, multipath=True)
    if _WINDOWS:
        return [Path(dirs)]
    return [Path(d) for d in dirs.split(os.pathsep)] + [Path("/etc")]


def _user_files() -> list[Path]:
    import platformdirs

    legacy = Path.home() / ("pip" if _WINDOWS else ".pip") / _BASENAME
    if sys.platform == "darwin":
        app_support = Path(platformdirs.user_data_dir("pip", appauthor=False, roaming=True))
        new = app_support if app_support.is_dir() else Path.home() / ".config" / "pip"
    else:
        new = Path(platformdirs.user_config_dir("pip", appauthor=False, roaming=True))
    return [legacy, new / _BASENAME]


def pip_config_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """pip's configuration files in the order pip loads them (a later one overrides)."""
    env = os.environ if environ is None else environ
    named = env.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    files = [d / _BASENAME for d in _global_dirs()]
    if not (named and os.path.exists(named)):
        files += _user_files()
    files.append(Path(sys.prefix) / _BASENAME)
    if named:
        files.append(Path(named))
    return files


def _read(path: Path) -> configparser.RawConfigParser | None:
    parser = configparser.RawConfigParser()
    try:
        with path.open(encoding="utf-8") as fh:
            parser.read_file(fh)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8"
        raise SourceError(f"pip configuration {path}: {why}") from None
    except configparser.Error as e:
        # Not str(e): configparser quotes the offending line, which may hold a password.
        line = getattr(e, "lineno", None) or next(iter(getattr(e, "errors", [])), (None,))[0]
        raise SourceError(f"pip configuration {path}: cannot parse line {line}") from None
    return parser


def _value_in(parser: configparser.RawConfigParser, section: str, name: str) -> str | None:
    if not parser.has_section(section):
        return None
    for key, value in parser.items(section):
        # pip's names: "index_url" and "--index-url" mean "index-url".
        if key.lstrip("-").replace("_", "-") == name and value.strip():
            return value.strip()
    return None


def pip_config_value(files: list[Path], name: str) -> IndexSetting | None:
    """A setting from pip's files: [install] before [global], then the latest file."""
    found: dict[str, IndexSetting] = {}
    for path in files:
        parser = _read(path)
        if parser is None:
            continue
        for section in SECTIONS:
            value = _value_in(parser, section, name)
            if value is not None:
                found[section] = IndexSetting(value, f"{path} [{section}] {name}")
    for section in reversed(SECTIONS):
        if section in found:
            return found[section]
    return None


def pip_config_index(files: list[Path]) -> IndexSetting | None:
    found = pip_config_value(files, "index-url")
    return IndexSetting(found.url.rstrip("/"), found.origin) if found is not None else None


def configured_cert(environ: Mapping[str, str] | None = None) -> str | None:
    """pip's ``cert`` (``PIP_CERT``, else pip.conf): the CA bundle that replaces the
    system's for HTTPS, as it does for pip. None: the system's (``SSL_CERT_FILE`` too)."""
    env = os.environ if environ is None else environ
    if env.get("PIP_CERT", "").strip():
        return env["PIP_CERT"].strip()
    found = pip_config_value(pip_config_files(env), "cert")
    return found.url if found is not None else None


def pip_default_index() -> IndexSetting:
    """pip's own default index, from the pip installed beside bakery."""
    try:
        from pip._internal.models.index import PyPI  # pip's one constant for it

        url = str(PyPI.simple_url)
    except Exception:  # no pip, or a pip that moved it: both mean "not known here"
        raise SourceError(
            "no package index is configured and pip is not installed to tell its default: "
            "set BAKERY_INDEX_URL (or PIP_INDEX_URL, or index-url in pip.conf)"
        ) from None
    return IndexSetting(url.rstrip("/"), "pip's default")
