"""Diffs and series, pure: bytes in, results out. The strict parser (``parse``), the hunk
engine that follows GNU patch (``engine``) and series folders (``series``). Nothing here
touches a tree, a cache or git."""
