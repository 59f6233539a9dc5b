"""Release versions as users type them: ``0.32``, ``v0.32.0`` and ``0.32.0`` are one release.

packaging parses them (PEP 440 drops a leading ``v``); vLLM spells its releases with three
numbers (``0.32.0``, ``0.11.0rc1``), and the cache, the index's file names and the ports in
``patches/`` use that spelling, so a shorter release is padded to three numbers.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

#: ``--vllm latest``: the newest final release on the index.
LATEST = "latest"


def parse(spec: str) -> Version | None:
    """The version spec names, or None when it is not one (a path, a URL, a word)."""
    if not spec or spec != spec.strip() or "/" in spec or spec.startswith("."):
        return None
    try:
        return Version(spec)
    except InvalidVersion:
        return None


def normalize(spec: str) -> str:
    """vLLM's spelling of a version (``v0.32`` -> ``0.32.0``); anything else unchanged."""
    v = parse(spec)
    if v is None:
        return spec
    release = list(v.release) + [0] * (3 - len(v.release))
    text = (f"{v.epoch}!" if v.epoch else "") + ".".join(str(n) for n in release)
    if v.pre is not None:
        text += f"{v.pre[0]}{v.pre[1]}"
    if v.post is not None:
        text += f".post{v.post}"
    if v.dev is not None:
        text += f".dev{v.dev}"
    if v.local is not None:
        text += f"+{v.local}"
    return text


def since(versions: list[Version], floor: str, include_pre: bool = False) -> list[str]:
    """The versions from floor on (pre-releases only with include_pre), oldest first."""
    low = parse(floor)
    if low is None:
        from bakery.errors import UsageError

        raise UsageError(f"--since {floor!r}: not a release version (like 0.30.0)")
    return [
        str(v)
        for v in sorted(versions)
        if v >= low and (include_pre or not (v.is_prerelease or v.is_devrelease))
    ]
