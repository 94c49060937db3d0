"""The verifier contract, one test for every lossless rule and both Triton paths: on every case of the
harness's matrix a rule takes, the exact law of what it emits is the target's (to 1e-9), nothing
impossible is emitted, and the mass sums to one. The rules are found as the configs are
(conf/verifier/*.yaml): a new rule's config puts it here, on every case at the core tier unless
CASES_TAKEN says otherwise; a rule that says it is lossy is shown failing instead.

Which cases a rule takes: block verification and the Triton chain path judge chains (the chain path
point and i.i.d. ones), traversal and the Triton tree path any tree with nodes, multi-draft the trees of
i.i.d. children (elsewhere it is the token rule, proven by the token rule's row). Which run takes a
case: its `tier` (harness.cases.TIERS) up to the rule's `default_tier`; -m slow takes the rest.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from harness.cases import TIERS, exact_cases
from harness.exact import ExactCase, Pipeline, check_case
from harness.mutants import mutants
from verifiers.triton_chain import TritonChainVerifier
from verifiers.triton_rules import triton_tree_verifier


def is_chain(case: ExactCase) -> bool:
    return case.shape.num_nodes > 0 and case.shape.is_chain


@dataclass(frozen=True)
class RuleUnderTest:
    name: str
    verifier: object
    takes: Callable[[ExactCase], bool]
    default_tier: str  # the last tier its default run takes


CONFIGS = {p.stem: instantiate(OmegaConf.load(p))
           for p in sorted((Path(__file__).resolve().parents[2] / "conf" / "verifier").glob("*.yaml"))}
# The cases a rule judges itself, where that is not all of them: block verification judges chains (a tree goes to
# the token rule), traversal any tree with nodes, multi-draft the trees of i.i.d. children (elsewhere it is the token
# rule, proven by the token rule's row); and the token rule, the reference, takes the default tier.
CASES_TAKEN = {"block": (is_chain, "core"), "traversal": (lambda c: c.shape.num_nodes > 0, "core"),
               "multidraft": (lambda c: c.kind == "iid", "core"), "token": (lambda c: True, "default")}
ORDER = ["token", "block", "traversal", "multidraft"]  # the reference first, then the rules with planted bugs
LOSSLESS_RULES = sorted((name for name, v in CONFIGS.items() if v.lossless),
                        key=lambda name: (ORDER.index(name) if name in ORDER else len(ORDER), name))
LOSSY_RULES = sorted(name for name, v in CONFIGS.items() if not v.lossless)
RULES = [
    *(RuleUnderTest(name, CONFIGS[name], *CASES_TAKEN.get(name, (lambda c: True, "core"))) for name in LOSSLESS_RULES),
    # The interpreter runs every Triton program in Python on CPU: a smoke spread by default.
    RuleUnderTest("triton_tree", triton_tree_verifier(), lambda c: c.shape.num_nodes > 0, "smoke"),
    RuleUnderTest("triton_chain", TritonChainVerifier(), lambda c: is_chain(c) and c.kind in ("point", "iid"), "smoke"),
]
CASES = exact_cases(heavy=True)


def runs_by_default(rule: RuleUnderTest, case: ExactCase) -> bool:
    return TIERS.index(case.tier) <= TIERS.index(rule.default_tier)


PAIRS = [pytest.param(rule, case, id=f"{rule.name}-{case.name}",
                      marks=() if runs_by_default(rule, case) else pytest.mark.slow)
         for rule in RULES for case in CASES
         # heavy: minutes each, the reference only
         if rule.takes(case) and (case.tier != "heavy" or rule.name == "token")]


@pytest.mark.parametrize("rule, case", PAIRS)
def test_the_rule_keeps_the_targets_law(rule, case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # block verification says once that it hands trees to the token rule
        result = check_case(case, Pipeline(verifier=rule.verifier))
    assert result.tv <= 1e-9, f"{rule.name} on {case.name}: TV {result.tv}"
    assert not result.support_violations
    assert abs(result.mass - 1) <= 1e-9


def test_every_rule_has_a_default_spread_that_can_fail():
    """Each rule's default cases hold sampled children with p != q (a point-only or p == q spread passes
    whatever a rule does), and each lossless rule's planted bugs have their witness among the token
    rule's (tests/harness/test_mutants.py shows each caught there)."""
    for rule in RULES:
        default = [c for c in CASES if rule.takes(c) and runs_by_default(rule, c)]
        assert any(c.kind != "point" and c.target is not c.draft for c in default), rule.name
    multidraft = next(r for r in RULES if r.name == "multidraft")
    siblings = [c for c in CASES if multidraft.takes(c) and runs_by_default(multidraft, c)
                and int((c.shape.children >= 0).sum(1).max()) >= 2 and c.target is not c.draft]
    assert siblings  # where k-sequential selection differs from the token rule
    for rule in RULES[1:]:  # a rule's planted bugs (harness/mutants.py): their witnesses run by default
        witnesses = {m.witness for m in mutants() if m.name.startswith(rule.name)}
        if not witnesses:
            continue
        default = {c.name for c in CASES if rule.takes(c) and runs_by_default(rule, c)}
        assert witnesses <= default, (rule.name, witnesses - default)
    assert {"block", "traversal", "multidraft"} <= {r.name for r in RULES if any(
        m.name.startswith(r.name) for m in mutants())}  # the rules whose planted bugs the harness keeps


def test_the_rules_are_found_by_their_configs():
    assert {"token", "block", "traversal", "multidraft"} <= set(LOSSLESS_RULES) and "typical" in LOSSY_RULES
    assert [r.name for r in RULES[:4]] == ORDER


@pytest.mark.parametrize("name", LOSSY_RULES)
def test_a_lossy_rule_fails_somewhere(name):
    lossy = Pipeline(verifier=CONFIGS[name])
    assert not lossy.verifier.lossless
    chains = [c for c in CASES if c.name.startswith("chain3/") and "greedy" not in c.name]
    assert any(check_case(c, lossy).tv > 1e-3 for c in chains)  # stops at the first case it fails
