"""Ports, the per-release copies of a series in ``patches/<series>/<release>/``: made from an
edited tree (``refresh``), proposed and proven for a release (``propose``), and the
differential check that proves a port behaves like the series (``differential``)."""
