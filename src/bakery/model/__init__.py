"""The data a bake produces and every command reads: hunk and file results and their
statuses (``results``), the typed report and its JSON form
(``report``), what a tree is (``identity``), and the manifest a baked tree carries, read once
and checked (``manifest``)."""
