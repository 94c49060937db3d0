"""Prompt lookup: matches longest first, several merged into one tree, exact, batched, bad input."""

import pytest
import torch

from engine.loop import generate
from framework.core.path_tree import node_paths
from framework.core.proposer import DecodeState
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import PromptLookupProposer
from proposers.ngram.match import batched_continuations, continuations

TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET = tiny_random_model("llama", seed=0, **TOY)


def brute_force(seq, min_n, max_n, length, max_matches):
    found = []
    for n in range(max_n, min_n - 1, -1):
        for start in range(len(seq) - n - 1, -1, -1):
            if seq[start : start + n] == seq[len(seq) - n :]:
                follow = tuple(seq[start + n : start + n + length])
                if follow not in [f for f, _ in found]:
                    found.append((follow, n))
    return found[:max_matches]


@pytest.mark.parametrize("seed", range(30))
def test_continuations_equal_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    seq = torch.randint(0, 3, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g).tolist()
    assert continuations(seq, 1, 3, 4, 5) == brute_force(seq, 1, 3, 4, 5)


@pytest.mark.parametrize("seed", range(10))
def test_batched_rows_of_their_own_lengths_equal_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 25, (6,), generator=g)
    tokens = torch.randint(0, 3, (6, 30), generator=g)  # past each row's length: another row's noise, never read
    found = batched_continuations(tokens, lengths, 1, 3, 4, 5)
    for b, n in enumerate(lengths.tolist()):
        got = [(tuple(t for t in path if t >= 0), int(w))
               for path, w in zip(found.tokens[b].tolist(), found.weights[b].tolist()) if w]
        assert got == brute_force(tokens[b, :n].tolist(), 1, 3, 4, 5)


def propose(proposer, prompt, root):
    proposer.prefill(torch.tensor(prompt), None)
    V = 16
    state = DecodeState(torch.tensor(root), torch.zeros(len(root), V, dtype=torch.bool), SamplingConfig(),
                        TorchSource(seed=0))
    return proposer.propose(state)


def test_several_matches_make_one_tree():
    # "1 2" occurred twice before, followed by 3 4 and by 5 6: both become branches under one shared root child
    tree = propose(PromptLookupProposer(max_ngram=2, depth=2, max_matches=4),
                   [[1, 2, 3, 4, 9, 1, 2, 5, 6, 1]], [2])
    paths = node_paths(tree)[0]
    assert {(5, 6), (3, 4)} <= set(paths) and tree.kind == "point"
    assert paths.index((5,)) < paths.index((3,))  # the most recent match first (equal n, equal weight)


def test_longer_matches_weigh_more():
    # the 2-gram "8 2" matches once (-> 7); the 1-gram "2" also matches before 4 and 5
    tree = propose(PromptLookupProposer(max_ngram=2, depth=1, max_matches=3), [[8, 2, 7, 2, 4, 2, 5, 8]], [2])
    assert node_paths(tree)[0][0] == (7,)


def test_no_match_is_an_empty_tree_and_short_prompts_are_plain_steps():
    assert propose(PromptLookupProposer(), [[1, 2, 3]], [4]).num_nodes == 0
    out = generate(HFTarget(TARGET), PromptLookupProposer(max_ngram=5, min_ngram=4), torch.tensor([[1]]), 5,
                   SamplingConfig(temperature=0))
    assert (out.tokens >= 0).all()


def test_rows_have_their_own_matches():
    tree = propose(PromptLookupProposer(max_ngram=1, depth=1), [[1, 5, 2, 6, 3], [1, 7, 2, 8, 3]], [1, 2])
    assert node_paths(tree)[0][0] == (5,) and node_paths(tree)[1][0] == (8,)


@pytest.mark.parametrize("sname, sampling", [("T1", SamplingConfig()),
                                             ("T0.7-topk2", SamplingConfig(temperature=0.7, top_k=2)),
                                             pytest.param("penalty1.5", SamplingConfig(repetition_penalty=1.5),
                                                          marks=pytest.mark.slow)])
def test_exact_law_through_the_real_loop(sname, sampling):
    prompt = torch.tensor([[1, 2, 0, 1, 2]])
    spec = exact_loop_law(TARGET, lambda: PromptLookupProposer(max_ngram=2, depth=2), prompt, 3, sampling)
    assert compare(spec, teacher_forced_law(TARGET, prompt, 3, sampling)).passes(1e-9)


def test_greedy_identity_and_batches():
    model = tiny_random_model("llama", vocab_size=16, seed=1, dtype="float64", init_std=0.4)
    prompts = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 1, 2], [5, 5, 6, 5, 5, 6, 5, 5, 6, 5]])
    for b in range(2):
        report = greedy_identity(model, PromptLookupProposer, prompts[b : b + 1], 32)
        assert report.equal, report.first_difference
        together = generate(HFTarget(model), PromptLookupProposer(), prompts, 32, SamplingConfig(temperature=0))
        assert together.tokens[b].tolist() == report.baseline


def test_bad_settings_are_named():
    for bad, name in ((dict(min_ngram=0), "min_ngram"), (dict(min_ngram=3, max_ngram=2), "exceeds the n-gram max"),
                      (dict(budget=0), "budget"), (dict(depth=0), "depth"),
                      (dict(max_matches=0), "max_matches")):
        with pytest.raises(ValueError, match=name):
            PromptLookupProposer(**bad)
