"""Diffs and series, pure: bytes in, results out. The strict parser (``parse``), the hunk
engine that follows GNU patch (``engine``), series folders (``series``) and the mail
headers of ``git format-patch`` files (``mail``). Nothing here
touches a tree, a cache or git."""
