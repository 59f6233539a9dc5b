"""JSON records by a library (msgspec): what a record is made of is its type, and the
library writes it and reads it back checked, instead of a hand-written pair of converters
per record (issue 44).

A record is a ``msgspec.Struct`` (``omit_defaults``: the contract's "left out when empty"
keys) or a dataclass (every field, in order). ``plain`` gives JSON's builtins, for
``json.dumps`` with the contract's indentation; ``load`` reads builtins back as a type,
checked the way msgspec's ``strict`` mode checks (no ``"1"`` for 1, no ``true`` for 1), and
raises :class:`RecordError` for anything of another shape. msgspec, not cattrs: it reads a
record and checks it in one C pass, and its import adds about 8 ms to a command that
loads the model (BENCHMARKS.md, "2026-12-06, JSON records by msgspec").
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")


class RecordError(ValueError):
    """A JSON value that is not the record asked for (its path and what was wrong)."""


def _hook(obj: object) -> object:
    if isinstance(obj, PurePath):
        return obj.as_posix()
    raise NotImplementedError(f"no JSON form for {type(obj).__name__}")


def plain(obj: object) -> Any:
    """``obj`` (a Struct or dataclass, lists and dicts of them, enums, paths) as JSON's
    builtins: dicts in field order, a Struct's default-valued fields left out where its
    type says ``omit_defaults``."""
    return msgspec.to_builtins(obj, enc_hook=_hook)


def load(data: object, kind: type[T]) -> T:
    """``data`` (JSON's builtins) as a ``kind``, checked; :class:`RecordError` if it is
    not one."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as e:
        raise RecordError(str(e)) from None
