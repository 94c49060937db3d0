"""Hybrid targets (Qwen3-Next: gated DeltaNet layers between attention layers): a recurrent state follows one
sequence, so chains are verified with the state recorded per depth and each row rolled back to its accepted one;
trees are refused by name. Greedy identity is the test (engines have shipped changed greedy output here)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.lm.target import HFTarget
from tests.composed import REPRESENTATIVES
from tests.framework.test_architectures import load, parts_of

CONF = Path(__file__).resolve().parents[2] / "conf"
METHODS = sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")
# Methods that draft a chain as configured: they must decode; every other one drafts trees (or, self_draft, drafts
# with the hybrid target itself, whose state cannot step back a draft's rejected tail) and must be named.
CHAINS = {"draft", "draft_chain", "prompt_lookup", "prompt_lookup_chain", "eagle3_chain", "string_match", "cross_vocab",
          "grammar", "mix_grammar", "mtp", "mtp_chain",  # mtp: its models=tiny default drafts a chain (top_k 1)
          # suffix: each row's text continues one way here, so its trees are chains (a branching one is named)
          "suffix"}
PROMPTS = torch.tensor([[40, 3, 9, 1, 0, 22, 5, 5, 40, 3, 9, 1], [7, 7, 1, 3, 7, 7, 1, 3, 7, 7, 1, 3],
                        [30, 2, 11, 5, 6, 30, 2, 11, 5, 6, 30, 2]])
GREEDY = SamplingConfig(temperature=0)


@pytest.fixture(scope="module")
def target():
    return instantiate(load("target=tiny_qwen3_next").target)


def test_plain_decoding_is_transformers_own(target):
    out = target.generate(PROMPTS[:1], max_new_tokens=24, do_sample=False)[0, PROMPTS.shape[1]:].tolist()
    assert generate(HFTarget(target), None, PROMPTS[:1], 24, GREEDY).tokens[0].tolist() == out


# The default tier: one method of each way of reading the target (tests/composed.py REPRESENTATIVES: two of them
# chains, four named) and the draft model's chain; every method under -m slow.
@pytest.mark.parametrize("methods", [(*REPRESENTATIVES, "draft"), pytest.param(tuple(METHODS), marks=pytest.mark.slow)],
                         ids=["representatives", "every_method"])
def test_chains_decode_plain_greedy_row_by_row_and_trees_are_named(target, methods):
    """Three rows that accept different counts each step (each row's state rolled back to its own depth)."""
    assert set(methods) <= set(METHODS)
    alone = [generate(HFTarget(target), None, PROMPTS[r:r + 1], 24, GREEDY).tokens[0].tolist() for r in range(3)]
    differ, named, accepted = {}, set(), {}
    for method in methods:
        # every tiny stack has the same sizes, so parts composed once serve; self_draft's draft is the target itself
        parts = (load("target=tiny_qwen3_next", "proposer=self_draft").proposer if method == "self_draft"
                 else parts_of(method, "qwen3_next"))
        make = instantiate(parts)
        try:
            out = generate(HFTarget(target), make(), PROMPTS, 24, GREEDY)
        except ValueError as error:
            assert "recurrent layers" in str(error), (method, error)
            named.add(method)
            continue
        accepted[method] = int(out.stats.accepted_total)
        if out.tokens.tolist() != alone:
            differ[method] = out.tokens.tolist()
    assert not differ, differ
    assert set(accepted) == CHAINS & set(methods) and named == set(methods) - CHAINS


class KnowsTheAnswer:
    """Chains of 4 from each row's plain continuation, right for the first (step + row) % 5 tokens, then wrong: rows
    keep 0 to 4 drafts, in different steps (random drafts rarely agree with this target, so every commit would
    roll back everything)."""

    hidden_layers, couples_rows = (), False

    def __init__(self, answers: list[list[int]], depth: int = 4):
        self.answers, self.depth, self.step = answers, depth, 0

    def prefill(self, input_ids, target) -> None:
        self.emitted = [1] * len(self.answers)  # the prefill's token

    def propose(self, state) -> CandidateTree:
        rows = []
        for b, answer in enumerate(self.answers):
            ahead = (answer[self.emitted[b]:] + [0] * self.depth)[: self.depth]
            right = (self.step + b) % (self.depth + 1)
            rows.append([t if i < right else (t + 1) % 64 for i, t in enumerate(ahead)])
        self.step += 1
        return CandidateTree.chain(torch.tensor(rows))

    def commit(self, result) -> None:
        self.emitted = [n + int(a) + 1 for n, a in zip(self.emitted, result.num_accepted)]

    def select(self, rows) -> None:  # finished rows leave the batch
        self.answers, self.emitted = [self.answers[r] for r in rows.tolist()], [self.emitted[r] for r in rows.tolist()]


def test_each_row_keeps_its_own_depth_of_a_chain(target):
    alone = [generate(HFTarget(target), None, PROMPTS[r:r + 1], 30, GREEDY).tokens[0].tolist() for r in range(3)]
    out = generate(HFTarget(target), KnowsTheAnswer(alone), PROMPTS, 30, GREEDY)
    assert out.tokens.tolist() == alone
    assert out.stats.accepted_total >= 20  # whole chains kept, partial ones, and none, across rows and steps
