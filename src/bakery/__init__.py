"""bakery: bake patched vLLM trees from ordered series of plain diffs."""

__version__ = "0.1.0"
