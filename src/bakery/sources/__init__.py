"""Pristine vLLM trees: where a ``--vllm`` spec points (``resolve``: index, local tree;
``gitsource``: ``git+`` URLs), versions as people type them (``versions``), which package
index and how it is read (``pipconf``, ``index``, ``urls``), the locked cache that keeps
them (``cache``, ``housekeeping``), and a release unpacked once, safely (``unpack``,
``tarstream``)."""
