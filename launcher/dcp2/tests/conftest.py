# SPDX-License-Identifier: Apache-2.0
"""The dcp2 tests' own plumbing (bakery's plugin knows no series).

``@pytest.mark.upstream("feature")``: the test covers an upstream feature that the
dcp2 ports carry. Whether the tree must have it comes from the release the bake's
manifest records (``../expectations.toml``, ``features``), never from the tree: a tree
that lacks a feature of its release fails, naming it; a tree that has a feature its
release lacks fails too (another release's kernel); a release without the feature
skips the test, and that skip is in the release's expected-skip set.

``ttir_probe``: the TTIR probe's process (dcp2_support.start_ttir_probe), started with
the session where bakery starts its helpers early (a GPU host of 4 cores or more:
``bakery.testing.plugin.starts_early``; once the ranks warm up before their first test,
the probe's test waited up to 2.6 s for it on the device when it started at collection's
end: BENCHMARKS.md), else when collection ends where its test is collected (in a
pytest-xdist worker, when the test asks for it). Killed when collection ends without its
test, and at the end of the session if no test waited for it. Its test runs last.
"""

import pytest
from dcp2_support import start_ttir_probe

from bakery.testing import starts_early, tree_from_env

#: The test that reads the TTIR probe's answer.
PROBE_TEST = "test_block_max_propagates_nan_when_compiled"
_PROBE = pytest.StashKey[object]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The probe's test runs last, so that its process (seconds of imports and a
    compile) has the whole run to finish in."""
    items.sort(key=lambda item: item.name == PROBE_TEST)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    # trylast: after bakery's plugin has checked the tree and the GPU
    if starts_early(config):
        config.stash[_PROBE] = start_ttir_probe(str(tree_from_env()))


def pytest_collection_finish(session: pytest.Session) -> None:
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker may never get the test: it starts the probe then
    collected = any(item.name == PROBE_TEST for item in session.items)
    if not collected:
        _stop_probe(session.config)
    elif session.config.stash.get(_PROBE, None) is None:
        session.config.stash[_PROBE] = start_ttir_probe(str(tree_from_env()))


def _stop_probe(config: pytest.Config) -> None:
    proc = config.stash.get(_PROBE, None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.communicate()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_probe(session.config)


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_probe(config)  # a session that ended in its configure or collection


@pytest.fixture
def ttir_probe(request: pytest.FixtureRequest, baked_tree):
    """The running TTIR probe of this session (started now if collection did not)."""
    proc = request.config.stash.get(_PROBE, None)
    return proc if proc is not None else start_ttir_probe(str(baked_tree))


@pytest.fixture(autouse=True)
def _upstream_feature(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("upstream")
    if marker is None:
        return
    (feature,) = marker.args
    has = request.module.FEATURES[feature]
    release = request.getfixturevalue("release")
    expected = request.getfixturevalue("expected")
    if expected is None:
        if not has:
            pytest.skip(f"no {feature} in this tree (release {release} has no expectations)")
        return
    wanted = feature in expected.data.get("features", [])
    if wanted and not has:
        pytest.fail(f"vLLM {release} has {feature} upstream, but this tree lacks it")
    if has and not wanted:
        pytest.fail(f"vLLM {release} has no {feature} upstream, but this tree has it")
    if not wanted:
        pytest.skip(f"vLLM {release} has no {feature} upstream")
