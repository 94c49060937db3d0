"""The exact law of the real loop under a grammar (xgrammar on a toy vocabulary) and a logit bias equals the
target's law under the same rule, computed by transformers' own processors and a hand-written automaton."""

import pytest
import torch

from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from harness.exact import compare
from harness.loop_mutants import CLEAN_AT_MOST, TOY, LoopCase
from harness.real import exact_loop_law, teacher_forced_law
from harness.toy_grammar import A_THEN_B, PAIRS
from proposers import DraftModelProposer, GrammarProposer, MixProposer

T1, T07K2, GREEDY = SamplingConfig(), SamplingConfig(temperature=0.7, top_k=2), SamplingConfig(temperature=0)
# biases exact in float32: transformers' sequence-bias processor keeps them in float32
BIAS = SamplingConfig(logit_bias={1: 1.5, 2: -0.75})
BANNED_WITH_PENALTY = SamplingConfig(temperature=0.9, repetition_penalty=1.3, logit_bias={4: float("-inf"), 0: 0.8})


def draft(vocab: int):
    return tiny_random_model("llama", seed=1, vocab_size=vocab, **TOY)


def grammar_and_draft_chain():
    return MixProposer([DraftModelProposer(draft(5), depth=1, kind="point"), GrammarProposer(depth=3)])


CASES = {
    "chain iid, a then b, T=1": LoopCase(dict(depth=2, kind="iid"), depth=3, grammar=A_THEN_B),
    "chain iid, a then b, T=0.7 top-2": LoopCase(dict(depth=2, kind="iid"), depth=3, grammar=A_THEN_B, sampling=T07K2),
    "tree wor, pairs, T=1": LoopCase(dict(branching=2, depth=1, kind="wor"), depth=2, grammar=PAIRS, vocab=5),
    "point chain, pairs, T=0.8": LoopCase(dict(depth=2, kind="point"), depth=3, grammar=PAIRS, vocab=5,
                                          sampling=SamplingConfig(temperature=0.8)),
    "point chain, pairs, greedy": LoopCase(dict(depth=3, kind="point"), depth=4, grammar=PAIRS, vocab=5,
                                           sampling=GREEDY),
    "grammar proposer, pairs": LoopCase(proposer_factory=lambda: GrammarProposer(depth=2), depth=3, grammar=PAIRS,
                                        vocab=5),
    "mix of draft and grammar, pairs": LoopCase(proposer_factory=grammar_and_draft_chain, depth=3, grammar=PAIRS,
                                                vocab=5),
    "logit bias, chain iid": LoopCase(dict(depth=2, kind="iid"), depth=3, sampling=BIAS),
    "bias -inf and penalty, pairs": LoopCase(dict(depth=2, kind="iid"), depth=2, grammar=PAIRS, vocab=5,
                                             sampling=BANNED_WITH_PENALTY),
}


@pytest.mark.parametrize("name", CASES)
def test_exact_law_through_the_loop(name):
    tv = CASES[name].tv()
    assert tv <= CLEAN_AT_MOST, f"{name}: TV {tv:.2e}"


@pytest.mark.parametrize("rule", ["grammar", "logit_bias"])
def test_the_rule_changes_the_law(rule):
    """The cases above would pass vacuously if the grammar or the bias did nothing: the loop's law under the
    rule is far from the reference's law without it."""
    case = CASES["chain iid, a then b, T=1"] if rule == "grammar" else CASES["logit bias, chain iid"]
    prompt = torch.tensor([[t % case.vocab for t in case.prompt]])
    target = tiny_random_model("llama", seed=0, vocab_size=case.vocab, **TOY)
    spec = exact_loop_law(target, lambda: DraftModelProposer(draft(case.vocab), **case.proposer), prompt, case.depth,
                          case.sampling, constraint_factory=None if case.grammar is None else case.grammar.constraint)
    free = teacher_forced_law(target, prompt, case.depth, SamplingConfig())
    assert compare(spec, free).tv > 0.05
