"""Pristine vLLM trees: where a ``--vllm`` spec points (``resolve``: index, local tree,
``git+`` URL), versions as people type them (``versions``), the locked cache that keeps
them (``cache``), and a release unpacked once, safely (``unpack``, ``tarstream``)."""
