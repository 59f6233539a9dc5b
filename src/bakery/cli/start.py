"""Where the command line starts (the ``bakery`` script and ``python -m bakery``): signals
handled from the first line.

SIGTERM becomes KeyboardInterrupt before the CLI (typer, rich) is imported, and the CLI is
imported inside the handler, so a Ctrl-C or SIGTERM while bakery starts exits 130 with one
line, as it does later (where the root command's handler, bakery.cli.console.exit_code,
reports it). Once the command is done, SIGINT and SIGTERM are ignored, so one arriving while
Python shuts down cannot turn a finished bake into a death by signal. This module imports
only the standard library: it must be in place before anything slow is imported.
"""

import signal
import sys


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _done() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def main() -> None:
    """The entry point: the CLI, with an interrupt at any moment reported as exit 130."""
    try:
        signal.signal(signal.SIGTERM, _interrupted)
        try:
            from bakery.cli.app import app

            app()
        finally:
            _done()
    except KeyboardInterrupt:  # before the CLI's handler is in place, or after it returned
        _done()
        print("interrupted", file=sys.stderr)
        sys.exit(130)
