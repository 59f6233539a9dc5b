# SPDX-License-Identifier: Apache-2.0
"""The dcp2 tests' own plumbing (bakery's plugin knows no series).

``@pytest.mark.upstream("feature")``: the test covers an upstream feature that the
dcp2 ports carry. Whether the tree must have it comes from the release the bake's
manifest records (``../expectations.toml``, ``features``), never from the tree: a tree
that lacks a feature of its release fails, naming it; a tree that has a feature its
release lacks fails too (another release's kernel); a release without the feature
skips the test, and that skip is in the release's expected-skip set.
"""

import pytest


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
