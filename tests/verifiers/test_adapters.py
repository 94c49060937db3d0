"""verifiers.adapters.ragged_chains: vLLM's rejection-sampler cases, in our words, through the one verifier."""

import subprocess
import sys

import pytest
import torch

from framework.core.sampling import SamplingConfig, process_logits
from harness.stats import g_test
from verifiers.adapters import flat_trees, ragged_chains

V = 6


def one_hot(ids, vocab=V):
    return torch.nn.functional.one_hot(torch.tensor(ids), vocab).double()


def test_all_accepted_emits_every_draft_then_the_bonus():
    drafts = torch.tensor([1, 2, 3, 4, 5])
    out = ragged_chains(drafts, [3, 2], one_hot([1, 2, 3, 4, 5]), one_hot([1, 2, 3, 4, 5]), torch.tensor([[0], [1]]))
    assert out.tolist() == [[1, 2, 3, 0], [4, 5, 1, -1]]


def test_early_rejection_emits_the_recovered_token_then_stops():
    target = one_hot([3, 2])  # the first draft (1) has target probability 0: rejected, 3 recovered
    out = ragged_chains(torch.tensor([1, 2]), [2], None, target, torch.tensor([[5]]))
    assert out.tolist() == [[3, -1, -1]]


def test_mixed_lengths_and_a_request_without_drafts():
    drafts = torch.tensor([1, 2, 4])
    target = one_hot([1, 2, 0])  # request 0 accepts both; request 2's only draft (4) is rejected for 0
    out = ragged_chains(drafts, [2, 0, 1], None, target, torch.tensor([[3], [5], [1]]))
    assert out.tolist() == [[1, 2, 3], [5, -1, -1], [0, -1, -1]]


def test_a_bonus_equal_to_the_padding_rule_cannot_be_accepted_twice():
    """Padding must never be accepted, whatever the bonus: a short row ends at its own length."""
    for bonus in range(V):
        out = ragged_chains(torch.tensor([1, 2, 3]), [1, 2], None, one_hot([1, 2, 3]), torch.tensor([[bonus], [0]]))
        assert out[0].tolist() == [1, bonus, -1]


def law(gen, rows, vocab):
    return torch.rand(rows, vocab, generator=gen, dtype=torch.float64).softmax(-1) if rows else torch.zeros(0, vocab)


OTHER = torch.linspace(1, 0.1, 10) / torch.linspace(1, 0.1, 10).sum()  # the law a planted bug emits from


def first_tokens(samples: int, seed: int = 0, bias: float = 0.0):
    """vLLM's setting (vocabulary 10, k = 2): the first emitted token of `samples` requests, and the target law at
    the first position; bias > 0 plants a bug: that share of requests emits a token from OTHER instead."""
    gen, vocab, k = torch.Generator().manual_seed(seed), 10, 2
    p, q = law(gen, k, vocab), law(gen, k, vocab)
    drafts = torch.stack([torch.multinomial(q[i], samples, replacement=True, generator=gen) for i in range(k)], 1)
    out = ragged_chains(drafts.flatten(), [k] * samples, q.repeat(samples, 1), p.repeat(samples, 1),
                        torch.multinomial(law(gen, 1, vocab)[0], samples, replacement=True, generator=gen)[:, None],
                        generator=torch.Generator().manual_seed(seed + 1))[:, 0]
    wrong = torch.rand(samples, generator=gen) < bias
    if bool(wrong.any()):
        out[wrong] = torch.multinomial(OTHER, int(wrong.sum()), replacement=True, generator=gen)
    return out, p[0]


@pytest.mark.parametrize("samples", [10, 1000, 100000])
def test_distribution_is_the_targets(samples):
    """The first emitted token follows the target law: a G-test at every size, whose power is known (it detects
    the TV error detectable_tv(n, dof) with probability 0.9); a bug of twice that TV fails the same test (at 10
    samples no error is detectable: only the support is checked)."""
    out, p0 = first_tokens(samples)
    reference = {(t,): float(w) for t, w in enumerate(p0.tolist())}
    observed = lambda tokens: {(t,): int(c) for t, c in enumerate(torch.bincount(tokens, minlength=10).tolist())}  # noqa: E731
    test = g_test(observed(out), reference)
    assert test.passes() and bool((out >= 0).all() and (out < 10).all())
    detectable = test.detectable_tv()
    assert (samples >= 1000) == (detectable < 0.25)
    if detectable < 0.25:  # the law sent a share b of requests to OTHER is off by exactly b * TV(OTHER, p0)
        share = 2 * detectable / float((OTHER - p0).abs().sum() / 2)
        bad, _ = first_tokens(samples, bias=share)
        assert not g_test(observed(bad), reference).passes()


def test_draft_equal_to_target_accepts_everything():
    gen = torch.Generator().manual_seed(3)
    p = law(gen, 4, V)
    drafts = torch.stack([torch.multinomial(p[i], 1, generator=gen) for i in range(4)]).flatten()
    out = ragged_chains(drafts, [4], p, p, torch.tensor([[2]]), generator=gen)
    assert out[0].tolist() == [*drafts.tolist(), 2]


@pytest.mark.parametrize("sampling", [SamplingConfig(top_k=3), SamplingConfig(top_p=0.6)])
def test_masked_target_never_emits_a_masked_token(sampling):
    """A target law after top-k / top-p (zeros outside what is kept) never emits a masked token: drafts
    that fall outside are rejected and the recovered token comes from the kept ones."""
    gen = torch.Generator().manual_seed(4)
    p = process_logits(torch.randn(2, V, generator=gen, dtype=torch.float64), sampling)  # [2, V]
    q = law(gen, 2, V)
    drafts = torch.stack([torch.multinomial(q[i], 2000, replacement=True, generator=gen) for i in range(2)], 1)
    bonus = torch.multinomial(p[1], 2000, replacement=True, generator=gen)[:, None]  # stands for the next law
    out = ragged_chains(drafts.flatten(), [2] * 2000, q.repeat(2000, 1), p.repeat(2000, 1), bonus, generator=gen)
    assert bool((p[0][out[:, 0]] > 0).all()) and bool((p[1][out[out[:, 1] >= 0, 1]] > 0).all())
    assert bool((drafts[:, 0] != out[:, 0]).any())  # some drafts were masked out and replaced


@pytest.mark.parametrize("call, message", [
    (lambda: ragged_chains(torch.tensor([1, 2]), [3], None, one_hot([1, 2]), torch.tensor([[0]])),
     "sums to 3 but draft_token_ids holds 2"),
    (lambda: ragged_chains(torch.tensor([1, 9]), [1, 1], None, one_hot([1, 2]), torch.tensor([[0], [0]])),
     "request 1: draft_token_ids holds 9"),
    (lambda: ragged_chains(torch.tensor([1, 2]), [1, 1], None, one_hot([1, 2]) * 0.5, torch.tensor([[0], [0]])),
     "request 0: target_probs row [0-9]+ does not sum to 1"),
    (lambda: ragged_chains(torch.tensor([1, 2]), [1, 1], one_hot([1, 3]), one_hot([1, 2]), torch.tensor([[0], [0]])),
     "request 1: a draft has zero draft_probs"),
    (lambda: ragged_chains(torch.tensor([1, 2, 3, 4, 5]), [1, 2, 2], None,
                           one_hot([1, 2, 3, 4, 5]) * torch.tensor([[1.0], [1], [1], [0.5], [1]]),
                           torch.tensor([[0], [0], [0]])), "request 2: target_probs row [0-9]+ does not sum to 1"),
    (lambda: ragged_chains(torch.tensor([1]), [1], None, one_hot([1]), torch.tensor([[0], [1]])),
     r"bonus_token_ids must be \[B, 1\]"),
])
def test_bad_input_names_the_request_and_the_field(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_import_verifiers_pulls_in_neither_transformers_nor_hydra():
    code = ("import sys, verifiers, verifiers.adapters; "
            "print(sorted({m.split('.')[0] for m in sys.modules}"
            " & {'transformers', 'hydra', 'omegaconf', 'datasets'}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])


def test_flat_trees_of_different_shapes_in_one_call():
    # request 0: the root's children 1 and 2, node 0's child 3; request 1: a chain of one (5)
    target = torch.cat([one_hot([2, 0, 4, 0]), one_hot([5, 0])])  # per request: the root's law, then each node's
    out = flat_trees(torch.tensor([1, 2, 3, 5]), [3, 1], [-1, -1, 0, -1], None, target)
    assert out.tokens.tolist() == [[2, 4, -1, -1], [5, 0, -1, -1]]  # node 1 accepted, then its law's token
    assert out.accepted_slots.tolist() == [[1, -1], [0, -1]] and out.num_accepted.tolist() == [1, 1]
    # table rows: request 0's root, its node 1; request 1's
    assert out.accept_index.tolist() == [[0, 2, -1], [4, 5, -1]]


def test_flat_trees_follow_the_target_law():
    """Two iid children of the root, 8,000 requests of the same shape (one verify call): the first
    emitted token follows the root's target law."""
    gen, n = torch.Generator().manual_seed(5), 8000
    p, q = law(gen, 3, 4), law(gen, 3, 4)  # rows: root, node 0, node 1
    drafts = torch.multinomial(q[0], 2 * n, replacement=True, generator=gen)
    out = flat_trees(drafts, [2] * n, [-1, -1] * n, q.repeat(n, 1), p.repeat(n, 1), kind="iid", generator=gen).tokens
    empirical = torch.bincount(out[:, 0], minlength=4).double() / n
    assert float((empirical - p[0]).abs().sum() / 2) < 0.025  # ~4 standard errors at N = 8,000


@pytest.mark.parametrize("call, message", [
    (lambda: flat_trees(torch.tensor([1, 2]), [2], [0, -1], None, one_hot([1, 2, 3])),
     "request 0: parents of its node 0 is 0: parents must point backwards"),
    (lambda: flat_trees(torch.tensor([1, 2]), [3], [-1, 0], None, one_hot([1, 2, 3])),
     "num_draft_tokens sums to 3 but draft_token_ids holds 2"),
    (lambda: flat_trees(torch.tensor([1, 2]), [2], [-1, 0], None, one_hot([1, 2])),
     r"target_probs must be \[T \+ B, V\]"),
    (lambda: flat_trees(torch.tensor([1, 2]), [2], [-1, 0], None, one_hot([1, 2, 3]) * 2),
     "request 0: target_probs row [0-9]+ does not sum to 1"),
])
def test_flat_trees_bad_input_names_the_request(call, message):
    with pytest.raises(ValueError, match=message):
        call()
