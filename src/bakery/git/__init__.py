"""Git, in one home: every git process starts in ``cmd`` (one environment policy), and every
git format bakery writes itself (objects, packs, the index) is in ``objects``; conflicts
are recorded as git records them, unmerged index entries (``conflicts``)."""
