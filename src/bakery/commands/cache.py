"""``bakery cache``: where the cache is, what it holds, and removing what is not needed
(the work is in sources/housekeeping.py)."""

from __future__ import annotations

from bakery.context import Context
from bakery.errors import UsageError
from bakery.sources import housekeeping
from bakery.sources.cache import Cache
from bakery.sources.housekeeping import Cleaned, Item


def listing(ctx: Context) -> tuple[Cache, list[Item]]:
    return ctx.cache, housekeeping.items(ctx.cache)


def clean(
    ctx: Context, *, keep: int | None, older_than: float | None, dry_run: bool = False
) -> Cleaned:
    if keep is not None and older_than is not None:
        raise UsageError("cache clean: give --keep N or --older-than DAYS, not both")
    if keep is not None and keep < 0:
        raise UsageError(f"cache clean --keep {keep}: a count of entries, 0 or more")
    if older_than is not None and older_than < 0:
        raise UsageError(f"cache clean --older-than {older_than:g}: days, 0 or more")
    return housekeeping.clean(ctx.cache, keep=keep, older_than=older_than, dry_run=dry_run)
