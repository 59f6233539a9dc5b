"""What a tree is (a pristine release, or a tree that only claims one), as data: made by
:mod:`bakery.sources.identity`, carried by the report (``vllm.identity``) and read by
``--strict`` and the renderer. Here, below them, so that the report holds the type, not its
JSON form."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    """What a tree is. ``pristine``: its files are the release it claims."""

    claims: str | None
    label: str | None
    pristine: bool
    tree_sha256: str | None = None
    describe: str | None = None
    #: the release the files were compared with (None: no comparison was possible)
    compared_with: str | None = None
    differs: tuple[str, ...] = ()
    count: int = 0
    note: str | None = None

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {
            "version": self.label,
            "claims": self.claims,
            "pristine": self.pristine,
            "compared_with": self.compared_with,
            "differs": self.count,
            "paths": list(self.differs),
        }
        if self.tree_sha256:
            d["tree_sha256"] = self.tree_sha256
        if self.describe:
            d["describe"] = self.describe
        if self.note:
            d["note"] = self.note
        return d

    def line(self) -> str:
        """One line for a person: what the tree is and why."""
        if self.pristine:
            return f"vLLM {self.label}: the pristine release"
        why = self.note or (
            f"{self.count} file(s) differ from the pristine {self.compared_with}"
            + (f": {', '.join(self.differs[:3])}" + (", ..." if self.count > 3 else ""))
        )
        return f"vLLM {self.label}: not the pristine {self.claims or 'release'} ({why})"
