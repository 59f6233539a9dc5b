"""``python -m bakery``: like the ``bakery`` script, with signals handled from the start.

SIGTERM becomes KeyboardInterrupt before the CLI (typer, rich) is imported, so a signal while
bakery starts exits 130 too; and once the command is done, SIGINT and SIGTERM are ignored, so
one arriving while Python shuts down cannot turn a finished bake into a death by signal.
"""

import signal
import sys


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _done() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


signal.signal(signal.SIGTERM, _interrupted)
try:
    try:
        from bakery.cli.app import main

        main()
    finally:
        _done()
except KeyboardInterrupt:
    _done()
    print("interrupted", file=sys.stderr)
    sys.exit(130)
