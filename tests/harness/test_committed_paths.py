"""The path each rule hands to the KV commit, checked where it matters: the exact law of the first 5 tokens
through the real loop, so a step that accepted nodes mid-sequence is followed by steps that read its commit.

At D = 3 (the prefill's token counted) no commit after an accepted node can reach the law: a wrong path
passed every test of block and traversal (harness/loop_mutants.py plants one per rule, caught
here at D = 5). The reference is transformers' own (harness/reference.py). The default run takes
one case per rule and kind of children that is cheap; -m slow runs every rule on every kind.
"""

import pytest

from harness.loop_mutants import LoopCase
from verifiers import LOSSLESS
from verifiers.block import BlockVerifier
from verifiers.multidraft import multidraft_verifier
from verifiers.traversal import TraversalVerifier

RULES = {"token": LOSSLESS, "block": BlockVerifier(), "traversal": TraversalVerifier(),
         "multidraft": multidraft_verifier()}
PROPOSERS = {"chain3-point": dict(depth=3, kind="point"), "tree2x2-point": dict(branching=2, depth=2, kind="point"),
             "chain2-iid": dict(depth=2, kind="iid"), "chain2-wor": dict(depth=2, kind="wor"),
             "root2-iid": dict(branching=2, depth=1, kind="iid"), "root2-wor": dict(branching=2, depth=1, kind="wor")}
DEFAULT = {("chain3-point", rule) for rule in RULES} | {("tree2x2-point", "token"), ("tree2x2-point", "traversal"),
                                                       ("root2-wor", "token"), ("root2-wor", "traversal"),
                                                       ("chain2-iid", "block")}


@pytest.mark.filterwarnings("ignore:block verification judges chains")
@pytest.mark.parametrize("proposer, rule", [pytest.param(p, r, id=f"{p}-{r}",
                                                         marks=() if (p, r) in DEFAULT else pytest.mark.slow)
                                            for p in PROPOSERS for r in RULES])
def test_the_committed_path_keeps_the_law_exact(proposer, rule):
    assert LoopCase(PROPOSERS[proposer], depth=5, verifier=RULES[rule]).tv() <= 1e-9
