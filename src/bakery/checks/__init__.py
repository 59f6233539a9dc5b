"""Checks of a planned bake against the code it lands in, on one AST index (``pyindex``):
the ambiguity and placement guard (``guard``) and the hunk contracts, the vLLM names a hunk's
new code relies on (``contracts``). They read pristine and patched text and never write."""
