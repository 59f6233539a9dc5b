"""Baking a tree: the in-memory plan (``plan``), the staged, atomic write (``staging``,
``tree``), the parallel tree copy (``treecopy``), the three-way fallback and drift warnings
(``merge``) with its syntax-aware merge of Python (``synmerge``; here, not in porting/, since
``check`` and ``apply`` use it too), and the ``--strict`` review rule (``strict``)."""
