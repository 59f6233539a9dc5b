"""Progress and notes through ``logging``: the core narrates, the CLI decides who hears.

Every module logs to its own logger (``logging.getLogger(__name__)``, under ``bakery``):
a step at INFO ("Applying 01-x.diff (1/2)", "Writing build/dcp2-0.34.0"), with
``extra={"event": KIND}`` naming what it is (``detected`` for what bakery found out, shown
dim), and detail for ``-v`` at DEBUG. Nothing here prints; the CLI's handler
(:class:`bakery.cli.console.ConsoleHandler`) does, at the level ``-q``/``-v`` set, and a
library caller hears nothing unless it adds a handler of its own.

Work done on behalf of another step (a port's candidate bakes, a matrix row's bake, the
plans behind a staleness check) runs :func:`muted`, as it ran without a callback before:
a contextvar, so that the mute holds for that work only (pypa/build's logger is a
contextvar for the same reason). A step of minutes is still said inside it
(``extra={"loud": True}``, see :class:`Unmuted`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar

_MUTED: ContextVar[bool] = ContextVar("bakery_logs_muted", default=False)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """What is logged below WARNING while the block runs is not shown."""
    token = _MUTED.set(True)
    try:
        yield
    finally:
        _MUTED.reset(token)


class Unmuted(logging.Filter):
    """Drops the progress (below WARNING) logged inside :func:`muted`, except a step
    logged with ``extra={"loud": True}``: one that takes minutes (a full test environment
    built for a matrix row), which a person would otherwise wait through in silence."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (
            record.levelno >= logging.WARNING
            or not _MUTED.get()
            or getattr(record, "loud", False) is True
        )


def event(record: logging.LogRecord) -> str:
    """The kind a record was logged with (``extra={"event": ...}``), or ""."""
    kind = getattr(record, "event", "")
    return kind if isinstance(kind, str) else ""
