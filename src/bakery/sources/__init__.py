"""Pristine vLLM trees: what a bake starts from (``pristine``), where a ``--vllm`` spec
points (``resolve``: index, local tree; ``gitsource``: ``git+`` URLs), versions as people
type them (``versions``), which package index and how it is read (``pipconf``, ``index``,
``bounded``), the locked cache that keeps them (``cache``, ``housekeeping``), upstream
wheels (``wheels``), and what a tree is against the release it claims (``identity``). A
release is unpacked once, safely, by ``bakery.formats``."""
