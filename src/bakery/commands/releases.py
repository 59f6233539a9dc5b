"""``bakery releases``: the vLLM releases on the package index, for people and for CI's
matrix (``--json`` prints one JSON list that a workflow passes to ``fromJSON``). The
listing itself is the sources' (:func:`bakery.sources.resolve.releases`)."""

from __future__ import annotations

from bakery.sources.resolve import latest, releases

__all__ = ["latest", "releases"]
