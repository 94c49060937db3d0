"""Default-tier representatives of what users run out of the box, exact through the real loop.

`proposer=draft` drafts a chain with a confidence cut, here under the depth schedule (`policy=adaptive`) too (both
couple the rows, so the exact check enumerates one world at a time); `proposer=draft_tree` a tree of wor children
several levels deep, with both too. Each representative keeps the configuration's features on the
vocabulary-3 toy pair at a size the default run affords (the cut at 0.45: any top-1 probability over three
tokens is >= 1/3, so the configured 0.3 would never cut there; the tree's draft samples its own top-2, which
keeps the enumeration of two wor levels to a second while p != q). A test reads the configs, so a change of
their features shows here; each representative catches a planted bug.
"""

from dataclasses import replace
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from framework.control.adaptive import AdaptiveDepth
from framework.core.sampling import SamplingConfig
from harness.loop_mutants import LoopCase, ReportsRawQ
from harness.mutants import WorWithoutQUpdate
from verifiers import LOSSLESS_RULES, TreeVerifier

CONF = Path(__file__).resolve().parents[2] / "conf"
CUT = dict(stop_below=0.45)
SCHEDULE = dict(policy_factory=lambda: AdaptiveDepth(max_depth=3, first_depth=2))  # room for 3 levels, 2 at first
REPRESENTATIVES = {
    "draft": LoopCase(dict(depth=3, kind="iid", **CUT), depth=3, **SCHEDULE),
    "draft_tree": LoopCase(dict(branching=2, depth=3, kind="wor", sampling=SamplingConfig(top_k=2), **CUT), depth=3,
                           **SCHEDULE),
}
PLANTED = {  # name -> (the representative under another sampling, what the bug changes)
    "draft": (dict(sampling=SamplingConfig(temperature=0.7, top_k=2)), dict(proposer_type=ReportsRawQ)),
    "draft_tree": ({}, dict(verifier=TreeVerifier({**LOSSLESS_RULES, "wor": WorWithoutQUpdate()}))),
}


def configured(name: str) -> dict:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        node = compose(config_name="config", overrides=[f"proposer={name}"]).proposer
    return {k: node.get(k) for k in ("kind", "branching", "stop_below")}


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_the_representative_has_the_configured_features(name):
    want, got = configured(name), REPRESENTATIVES[name].proposer
    assert got["kind"] == want["kind"] and (got.get("branching", 1) > 1) == (want["branching"] > 1)
    if want["branching"] > 1:
        assert got["depth"] >= 2  # a tree deeper than one level
    assert (got["stop_below"] > 0) == (want["stop_below"] > 0)


@pytest.mark.parametrize("name", REPRESENTATIVES)
def test_the_representative_is_exact_and_catches_a_planted_bug(name):
    case = REPRESENTATIVES[name]
    assert case.tv() <= 1e-9
    sampling, bug = PLANTED[name]
    witness = replace(case, **sampling)
    assert witness.tv() <= 1e-9 and witness.tv(**bug) > 1e-6
