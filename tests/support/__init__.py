"""What bakery's tests share, by concern; no test module imports another test module.

- ``paths``: the project's root, samples/, fixtures/ and the network tests' cache;
- ``trees``: files written under a folder, tree digests and snapshots, the tiny tree;
- ``repos``: local git repositories (git with a fixed identity) and traps that record
  whether git ran foreign code;
- ``series``: series folders and ``diff -u`` text;
- ``releases``: small vLLM releases put into bakery's cache, a series over them;
- ``dsa``: an upstream vLLM history of real shapes (the dcp2 series' target file);
- ``index``: the one fake package index on 127.0.0.1 (and the files it serves);
- ``archives``: the one sdist builder, hand-made zips, a wheel's RECORD check;
- ``gnupatch``: GNU patch, the oracle of the diff engine;
- ``cli``: the contract's checks of a refusal.

Fixtures are in tests/conftest.py.
"""
