"""Per-position drafters (Medusa's heads, DFlash's block, PARD's masks, P-EAGLE's parallel call) and a draft over
another vocabulary, drawing their trees under a grammar: the exact law of the loop equals the target's law under
the same grammar. Their q must be the law each child was drawn from, after the mask along its own path: a q taken
before the mask (what was drawn was masked, what was reported was not) breaks the law (issue 52, finding 1)."""

from __future__ import annotations

import pytest

from framework.core.sampling import SamplingConfig
from harness.loop_mutants import CLEAN_AT_MOST, LoopCase
from harness.toy_grammar import PAIRS, PAIRS_EBNF
from proposers import MedusaProposer, VocabularyMap
from proposers.eagle.head import random_head
from proposers.eagle.parallel import ParallelEagleProposer
from proposers.medusa.heads import random_heads
from proposers.parallel.dflash import random_dflash
from proposers.parallel.dflash_proposer import DFlashProposer
from proposers.parallel.pard import ParallelDraftProposer, random_pard

V, H = 5, 16  # the PAIRS grammar's vocabulary; the toy target's width
TREE = [[0], [1], [0, 0]]  # two drawn children of the root, one grandchild


def drafters(kind: str) -> dict:
    return {
        "medusa": lambda: MedusaProposer(random_heads(H, V, 2, seed=0, scale=2.0, dtype="float64"), TREE, kind=kind),
        "dflash": lambda: DFlashProposer(random_dflash(H, V, 1, block_size=3, seed=0, scale=2.0, dtype="float64"),
                                         TREE, kind=kind),
        "pard": lambda: ParallelDraftProposer(random_pard(V, seed=1, dtype="float64"), TREE, kind=kind, depth=2),
        "peagle": lambda: ParallelEagleProposer(random_head(H, V, 1, (0, 1), "eagle3", seed=0, scale=2.0,
                                                            dtype="float64", pard_token=0), TREE, depth=2, kind=kind),
    }


GRAMMARS = {"regex": PAIRS, "ebnf": PAIRS_EBNF}
T07 = SamplingConfig(temperature=0.7)
CASES = {f"{name} {kind}, {grammar}": LoopCase(proposer_factory=make, depth=3, grammar=GRAMMARS[grammar], vocab=V,
                                                sampling=T07 if kind == "wor" else SamplingConfig())
         for kind in ("iid", "wor") for name, make in drafters(kind).items() for grammar in GRAMMARS}
CASES |= {f"cross_vocab iid, {grammar}": LoopCase(dict(depth=2, kind="iid"), depth=3, grammar=GRAMMARS[grammar],
                                                   vocab=V,
                                                   vocabulary=lambda: VocabularyMap.padded(target_size=V,
                                                                                           draft_size=V + 2))
          for grammar in GRAMMARS}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if "wor" in n and "regex" not in n else ())
                                  for n in CASES])
def test_the_loop_law_under_a_grammar_is_the_targets(name):
    tv = CASES[name].tv()
    assert tv <= CLEAN_AT_MOST, f"{name}: TV {tv:.2e}"
