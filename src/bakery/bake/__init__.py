"""Baking a tree: the in-memory plan and the staged, atomic write (``tree``), the three-way
fallback and drift warnings (``merge``), ports from an edited tree (``refresh``), the report
and manifest (``report``) and the parallel tree copy (``treecopy``); packages made from a
bake (``baked``, ``wheel``, ``sdist``)."""
