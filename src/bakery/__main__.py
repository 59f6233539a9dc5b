"""``python -m bakery``: the ``bakery`` script (bakery.cli.start, signals handled from the
first line)."""

import sys

try:
    from bakery.cli.start import main
except KeyboardInterrupt:  # the one moment before start's handler: the same line and code
    print("interrupted", file=sys.stderr)
    sys.exit(130)

if __name__ == "__main__":
    main()
