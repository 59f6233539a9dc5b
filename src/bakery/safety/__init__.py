"""Checks applied to everything bakery takes from data it did not write: paths
(``paths.py``), URLs before they are shown or stored (``urls.py``), text before it is
printed or put in a report (``text.py``), and the sizes it reads (``limits.py``)."""
