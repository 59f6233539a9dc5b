"""Pristine vLLM trees: where a ``--vllm`` spec points (``resolve``: index, local tree,
``git+`` URL), the locked cache that keeps them (``cache``), and a release unpacked once,
safely (``unpack``, ``tarstream``); a release's upstream wheels (``wheels``)."""
