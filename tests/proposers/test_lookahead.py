"""Lookahead: the window's Jacobi update, the pool, one forward per step, exactness and batches."""

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import LookaheadProposer
from proposers.ngram.pool import NgramPool

TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
TARGET = tiny_random_model("llama", seed=0, **TOY)
PROMPT = torch.tensor([[1, 2, 0, 1]])
SAMPLINGS = {"T1": SamplingConfig(), "T0.7-topk2": SamplingConfig(temperature=0.7, top_k=2),
             "penalty1.5": SamplingConfig(repetition_penalty=1.5)}
SMALL = dict(window=2, ngram=2, guesses=2)


def exact_tv(sampling, target_factory=HFTarget, **settings):
    spec = exact_loop_law(TARGET, lambda: LookaheadProposer(**settings), PROMPT, 3, sampling,
                          target_factory=target_factory)
    return compare(spec, teacher_forced_law(TARGET, PROMPT, 3, sampling))


@pytest.mark.parametrize("sname", ["T1", "T0.7-topk2"])
def test_exact_law_through_the_real_loop(sname):
    assert exact_tv(SAMPLINGS[sname], **SMALL).passes(1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("settings", [dict(window=3, ngram=3, guesses=3), dict(SMALL, pool_from_prompt=True)])
@pytest.mark.parametrize("sname", SAMPLINGS)
def test_exact_law_more_settings(sname, settings):
    assert exact_tv(SAMPLINGS[sname], **settings).passes(1e-9)


def test_observe_side_grows_the_window_then_pools_its_columns():
    proposer = LookaheadProposer(window=2, ngram=3, guesses=2)
    proposer.prefill(torch.tensor([[5, 6]]), HFTarget(tiny_random_model("llama", vocab_size=16)))
    assert proposer.levels.shape == (1, 1, 2) and set(proposer.levels.flatten().tolist()) <= {5, 6}  # prompt tokens
    proposer.levels = torch.tensor([[[5, 6]]])
    start = proposer.levels.clone()
    logits = torch.zeros(1, 2, 16)
    logits[0, 0, 9], logits[0, 1, 8] = 1.0, 1.0  # the top level's argmax: (9, 8)
    proposer.observe_side(logits)
    assert proposer.levels[0].tolist() == [start[0, 0].tolist(), [9, 8]] and proposer.pool.grams.shape[1] == 0
    logits = torch.zeros(1, 4, 16)
    logits[0, 2, 3], logits[0, 3, 4] = 1.0, 1.0  # rows 2, 3 = level 1: new (3, 4)
    proposer.observe_side(logits)
    first = start[0, 0].tolist()
    newest = lambda token: proposer.pool.newest_tails(torch.tensor([token]))[0, 0].tolist()  # noqa: E731
    assert newest(first[0]) == [9, 3] and newest(first[1]) == [8, 4]  # column n-grams
    assert proposer.levels[0].tolist() == [[9, 8], [3, 4]]  # the oldest level dropped


def test_one_target_forward_per_step_and_pooled_guesses_get_accepted(monkeypatch):
    model = tiny_random_model("llama", vocab_size=8, seed=2, dtype="float64", init_std=0.6)
    target = HFTarget(model)
    calls = []
    real = target.lm.forward
    monkeypatch.setattr(target.lm, "forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    out = generate(target, LookaheadProposer(window=4, ngram=3, guesses=4), torch.tensor([[1, 2, 3]]), 48,
                   SamplingConfig(temperature=0))
    assert len(calls) == 1 + out.stats.target_forwards  # the prefill, then exactly one forward per step
    assert out.stats.accepted_total > 0  # the Jacobi window's n-grams do get accepted (a peaked toy target)


@pytest.mark.parametrize("arch", ["llama", pytest.param("gpt2", marks=pytest.mark.slow)])
def test_greedy_identity(arch):
    model = tiny_random_model(arch, vocab_size=16, seed=1, dtype="float64", init_std=0.4)
    for settings in (dict(window=4, ngram=3, guesses=4), dict(window=3, ngram=4, guesses=2, pool_from_prompt=True)):
        report = greedy_identity(model, lambda: LookaheadProposer(**settings), torch.tensor([[1, 2, 3, 1, 2, 3]]), 32)
        assert report.equal, (arch, settings, report.first_difference)


def test_rows_keep_their_own_window_and_pool():
    model = tiny_random_model("llama", vocab_size=16, seed=1, dtype="float64", init_std=0.4)
    prompts = torch.tensor([[1, 2, 3, 1, 2, 3], [7, 7, 5, 7, 7, 5], [4, 9, 4, 9, 4, 9]])
    greedy = SamplingConfig(temperature=0)
    together = generate(HFTarget(model), LookaheadProposer(window=3, ngram=3, guesses=3, pool_from_prompt=True),
                        prompts, 24, greedy)
    for b in range(3):
        alone = generate(HFTarget(model), None, prompts[b : b + 1], 24, greedy)
        assert together.tokens[b].tolist() == alone.tokens[0].tolist()


def test_bad_settings_are_named():
    for bad, name in ((dict(window=0), "window"), (dict(ngram=0), "ngram"), (dict(guesses=0), "guesses"),
                      (dict(ngram=1), "ngram")):
        with pytest.raises(ValueError, match=name):
            LookaheadProposer(**bad)


def test_a_prompt_shorter_than_the_ngram_is_a_plain_step():
    model = tiny_random_model("llama", vocab_size=16, seed=1)
    out = generate(HFTarget(model), LookaheadProposer(window=2, ngram=4, guesses=2, pool_from_prompt=True),
                   torch.tensor([[3]]), 6, SamplingConfig(temperature=0))
    assert (out.tokens >= 0).all() and out.stats.steps[0].nodes == 0


@pytest.mark.parametrize("seed", range(6))
def test_the_pool_answers_as_per_token_lists_of_the_newest_tails(seed):
    """The tensor pool (compacted as it doubles) against the rule it stands for: per first token, a list of the
    `keep` newest distinct tails, a tail seen again moved to the front."""
    g = torch.Generator().manual_seed(seed)
    B, N, keep, vocab = 3, 3, 2, 4
    pool = NgramPool(torch.randint(0, vocab, (B, 5, N), generator=g), keep)
    lists = [{} for _ in range(B)]

    def remember(grams):
        for b, row in enumerate(grams.tolist()):
            for gram in row:
                tails = lists[b].setdefault(gram[0], [])
                if tuple(gram[1:]) in tails:
                    tails.remove(tuple(gram[1:]))
                tails.insert(0, tuple(gram[1:]))
                del tails[keep:]

    remember(pool.grams)
    widths = []
    for _ in range(60):
        grams = torch.randint(0, vocab, (B, 4, N), generator=g)
        pool.remember(grams)
        remember(grams)
        widths.append(pool.grams.shape[1])
        for token in range(vocab):
            got = pool.newest_tails(torch.full((B,), token))
            for b in range(B):
                assert [tuple(t) for t in got[b].tolist() if t[0] >= 0] == lists[b].get(token, [])
    assert any(later < earlier for earlier, later in zip(widths, widths[1:]))  # it compacted along the way
