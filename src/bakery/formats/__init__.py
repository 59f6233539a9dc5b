"""The fenced fast-path codecs: a tar stream read once (``tarstream``, POSIX.1-2001 ustar and
pax; oracle: ``tarfile`` in tests/formats/test_unpack.py), a release unpacked straight into a
git object store (``unpack``; oracle: ``git`` itself), and a zip central directory read and
rewritten member by member (``zipraw``, APPNOTE 6.3; oracle: ``zipfile`` and pip in
tests/package/test_wheel*.py). Each is hand-written for speed and bounds; a maintainer can
leave them alone."""
