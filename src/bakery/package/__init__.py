"""Packages made from a baked tree: what a bake's wheel or sdist may carry (``baked``), the
upstream wheel with the baked files swapped in (``wheel``), and a source distribution of the
baked tree (``sdist``)."""
