"""``bakery releases``: the vLLM releases on the package index, for people and for CI's
matrix (``--json`` prints one JSON list that a workflow passes to ``fromJSON``)."""

from __future__ import annotations

from bakery.sources import versions


def releases(since: str | None = None, include_pre: bool = False) -> list[str]:
    """Every release with a source distribution on the index, from since on, oldest first."""
    from bakery.sources.resolve import release_versions

    versions.since([], since or "0")  # a --since that is no version: one line, before the index
    return versions.since(release_versions(include_pre), since or "0", include_pre)


def latest() -> str:
    """The newest final release on the index (``--vllm latest``)."""
    from bakery.errors import SourceError
    from bakery.safety.urls import redact_url
    from bakery.sources.pipconf import configured_index
    from bakery.sources.resolve import release_versions

    found = release_versions(False)
    if not found:
        index = redact_url(configured_index().url)
        raise SourceError(f"no vLLM release with a source distribution on {index}")
    return str(found[-1])
