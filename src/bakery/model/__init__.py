"""The data a bake produces and every command reads: the typed report and its JSON form
(``report``), and the manifest a baked tree carries, read once and checked (``manifest``)."""
