"""Every bound bakery puts on what it reads, in one place (README "Limits" states them).

A release's sdist is about 30 MB packed and 150 MB unpacked in 8,000 members; the bounds
are far above that and far below what would exhaust a CI runner.
"""

from __future__ import annotations

MiB = 1 << 20

#: A downloaded or git-archived archive, read whole into memory.
MAX_ARCHIVE = 512 * MiB
#: The tar stream inside it, once inflated (a gzip bomb stops here).
MAX_UNPACKED = 1024 * MiB
#: One file of a local tree hashed for its identity (sources/identity.py).
MAX_TREE_FILE = 256 * MiB
#: One file of an archive, held in memory while it is written (vLLM's largest is a few MB).
MAX_FILE = 128 * MiB
#: Members of one archive.
MAX_MEMBERS = 200_000
#: Symlinks followed while resolving one path of an archive (the kernel's 40).
MAX_LINK_STEPS = 40
#: One answer of the package index (its JSON or HTML page of a project).
MAX_INDEX_ANSWER = 64 * MiB
#: A JSON report or manifest read back by bakery.
MAX_REPORT = 256 * MiB
#: Seconds a download or index request may stall.
NET_TIMEOUT = 60
