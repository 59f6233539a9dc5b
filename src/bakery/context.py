"""The context a command runs in: built once where the CLI starts and passed down, as
pre-commit passes its ``Store``.

One frozen value instead of ``cache``, ``progress`` and ``home`` threaded by hand through
every signature: the project (the folder holding ``launcher/`` and ``patches/``), bakery's
cache, and the download progress bar the CLI draws. How much the user asked to hear is
logging's level, set by the CLI: the core's narration goes through ``logging``
(bakery.logs), not through the context.

Below the commands and the porting, bake and testing code that take it; above the sources
(the cache and the pristine trees are theirs), which take the cache itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bakery.project import project_root

if TYPE_CHECKING:  # the cache's module (filelock, git) is imported when a command uses it
    from bakery.sources.cache import Cache
    from bakery.sources.pristine import Progress


def _cache() -> Cache:
    """bakery's cache at BAKERY_CACHE_DIR or the platform's names."""
    from bakery.sources.cache import Cache

    return Cache()


@dataclass(frozen=True)
class Context:
    home: Path
    cache: Cache = field(default_factory=_cache)
    progress: Progress | None = None

    @classmethod
    def here(
        cls,
        *,
        cache: Cache | None = None,
        progress: Progress | None = None,
    ) -> Context:
        """The context of the project bakery runs in (BAKERY_HOME, else the nearest folder
        above the working directory with launcher/), with the cache BAKERY_CACHE_DIR or
        the platform's names."""
        return cls(project_root(), cache or _cache(), progress)
