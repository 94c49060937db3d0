"""The mix: several proposers' trees merged into one point tree, exact, with each part committing right."""

import copy

import pytest
import torch

from engine.loop import Decoder, generate
from framework.core.path_tree import node_paths
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import DraftModelProposer, EagleProposer, LookaheadProposer, MixProposer, PromptLookupProposer
from proposers.eagle.head import random_head

TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET, DRAFT = tiny_random_model("llama", seed=0, **TOY), tiny_random_model("llama", seed=1, **TOY)
MODEL = tiny_random_model("llama", vocab_size=16, seed=3, dtype="float64", init_std=0.4)
PROMPTS = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [5, 9, 6, 5, 9, 6, 5, 9, 6, 5]])


class Recording:
    """Wraps a proposer and keeps the trees it proposed."""

    def __init__(self, inner):
        self.inner, self.trees = inner, []
        self.hidden_layers, self.couples_rows = inner.hidden_layers, inner.couples_rows

    def prefill(self, *a):
        self.inner.prefill(*a)

    def propose(self, state):
        self.trees.append(self.inner.propose(state))
        return self.trees[-1]

    def commit(self, result):
        self.inner.commit(result)

    def select(self, rows):
        self.inner.select(rows)


def test_merged_tree_holds_every_parts_paths_once():
    parts = [Recording(DraftModelProposer(copy.deepcopy(MODEL), depth=3, kind="point")),
             Recording(PromptLookupProposer())]
    mix = Recording(MixProposer(parts, budget=64))
    generate(HFTarget(MODEL), mix, PROMPTS, 12, SamplingConfig(temperature=0))
    for step, merged in enumerate(mix.trees):
        for b, paths in enumerate(node_paths(merged)):
            assert len(set(paths)) == len(paths)  # identical paths deduplicated
            for part in parts:
                assert set(node_paths(part.trees[step])[b]) <= set(paths)  # budget 64: nothing cut


def test_budget_cuts_the_merged_tree():
    mix = Recording(MixProposer([DraftModelProposer(copy.deepcopy(MODEL), depth=4, kind="point"),
                                 PromptLookupProposer()], budget=3))
    generate(HFTarget(MODEL), mix, PROMPTS, 8, SamplingConfig(temperature=0))
    assert max(t.num_nodes for t in mix.trees) == 3


def mix_tv(kind, draft_depth, sampling, law_depth):
    prompt = torch.tensor([[1, 2, 0, 1]])
    make = lambda: MixProposer([lambda: DraftModelProposer(DRAFT, depth=draft_depth, kind=kind),
                                lambda: PromptLookupProposer(max_ngram=2, depth=2)])
    return compare(exact_loop_law(TARGET, make, prompt, law_depth, sampling),
                   teacher_forced_law(TARGET, prompt, law_depth, sampling))


def test_exact_law_of_a_mix():
    assert mix_tv("point", 2, SamplingConfig(temperature=0.7, top_k=2), 3).passes(1e-9)


def test_exact_law_with_a_sampling_draft_part():
    """The draft part draws iid from its law (coins of its own, enumerated too); merged with prompt
    lookup the tree is point, and exact. A mix couples rows, so its worlds run one at a time: kept small."""
    assert mix_tv("iid", 1, SamplingConfig(), 2).passes(1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=0.7, top_k=2)])
def test_exact_law_with_a_sampling_draft_part_deeper(sampling):
    assert mix_tv("iid", 2, sampling, 3).passes(1e-9)


def test_draft_part_cache_holds_the_committed_text():
    """Tokens accepted from another part's branch reach the draft's cache: after the run, the draft's
    next logits equal a fresh forward of each row's committed sequence."""
    draft = copy.deepcopy(MODEL)
    part = DraftModelProposer(draft, depth=2, kind="point")
    lookup = PromptLookupProposer()
    decoder = Decoder(HFTarget(MODEL), MixProposer([part, lookup]), SamplingConfig(temperature=0), TorchSource(seed=0))
    decoder.prefill(PROMPTS)  # both rows all along (generate lets a finished row leave the batch)
    for _ in range(8):
        decoder.step()
    assert decoder.stats.accepted_total > 0
    # commits what the last step deferred, as a next step would
    got = part.read_root(torch.tensor([1, 1])).logits[:, -1]
    for b in range(2):
        committed = lookup.history.row(b)  # prompt + every emitted token before the current root
        assert part.lm.length[b] == len(committed)
        with torch.no_grad():
            want = MODEL(torch.tensor([committed + [1]])).logits[0, -1]
        torch.testing.assert_close(got[b], want, rtol=1e-9, atol=1e-9)


def test_greedy_identity_with_eagle_and_lookahead_parts():
    """Parts that read hidden states (EAGLE) and ride side rows (lookahead) in one mix."""
    head = lambda: random_head(32, 16, 2, target_layers=(-1,), seed=0, dtype="float64", scale=2.0)
    make = lambda: MixProposer([EagleProposer(head(), top_k=2, depth=2, budget=4), PromptLookupProposer(),
                                LookaheadProposer(window=3, ngram=3, guesses=2)])
    for b in range(2):
        report = greedy_identity(MODEL, make, PROMPTS[b : b + 1], 24)
        assert report.equal, report.first_difference


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="at least one part"):
        MixProposer([])
    with pytest.raises(ValueError, match="budget"):
        MixProposer([PromptLookupProposer()], budget=0)
    with pytest.raises(ValueError, match="weights"):
        MixProposer([PromptLookupProposer()], weights=[1.0, 2.0])
