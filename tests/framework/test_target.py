"""HFTarget on four architectures: tree logits equal sequential logits; commit equals a fresh run."""

import pytest
import torch

from framework.core.tree import CandidateTree
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from verifiers import Verification

ARCHS = ["llama", "qwen2", "mistral", "gpt2"]


def accepted(path, num_accepted):
    """A Verification with just what commit reads: the accepted path and its length."""
    return Verification(torch.full((len(path), 1), -1), torch.tensor(num_accepted), torch.tensor(path))


def reference(arch, seed):
    """The same weights behind the model's own sdpa attention, for plain sequential forwards."""
    model = tiny_random_model(arch, seed=seed, dtype="float64", init_std=0.3)
    model.set_attn_implementation("sdpa")
    return model


@torch.no_grad()
def sequential_logits(model, sequence):
    return model(torch.tensor([sequence])).logits[0, -1]


@pytest.mark.parametrize("arch", ARCHS)
def test_tree_logits_equal_sequential_and_commit_equals_fresh(arch):
    seed = ARCHS.index(arch)
    target, ref = HFTarget(tiny_random_model(arch, seed=seed, dtype="float64", init_std=0.3)), reference(arch, seed)
    prompt = [5, 9, 2, 33, 17]
    target.prefill(torch.tensor([prompt]))
    #        root(7)
    #       /      \
    #     0:11     1:12
    #    /    \       \
    #  2:13  3:14     4:15
    #   |
    #  5:16
    parents = [-1, -1, 0, 0, 1, 2]
    tree = CandidateTree.from_parents(torch.tensor([[11, 12, 13, 14, 15, 16]]), parents)
    out = target.forward_tree(torch.tensor([7]), tree)
    paths = {0: [7], 1: [7, 11], 2: [7, 12], 3: [7, 11, 13], 4: [7, 11, 14], 5: [7, 12, 15], 6: [7, 11, 13, 16]}
    for row, path in paths.items():
        assert (out.logits[0, row] - sequential_logits(ref, prompt + path)).abs().max() <= 1e-10, (arch, row)

    # Accept 11 -> 13 (path [0, 2]); the next root is 20. Then a second tree on top of the commit.
    target.commit(accepted([[0, 2, -1]], [2]))
    out = target.forward_tree(torch.tensor([20]), CandidateTree.chain(torch.tensor([[21, 22]])))
    committed = prompt + [7, 11, 13]
    for row, extra in enumerate([[20], [20, 21], [20, 21, 22]]):
        assert (out.logits[0, row] - sequential_logits(ref, committed + extra)).abs().max() <= 1e-10, (arch, row)


def test_ragged_batch_commit():
    """Rows that accept different numbers of nodes keep their own caches (holes are masked)."""
    model = tiny_random_model("llama", seed=3, dtype="float64", init_std=0.3)
    ref = reference("llama", 3)
    target = HFTarget(model)
    prompt = torch.tensor([[4, 8, 15], [16, 23, 42]])
    target.prefill(prompt)
    target.forward_tree(torch.tensor([1, 2]), CandidateTree.chain(torch.tensor([[30, 31, 32], [40, 41, 42]])))
    target.commit(accepted([[0, 1, 2], [-1, -1, -1]], [3, 0]))
    out = target.forward_tree(torch.tensor([50, 51]), CandidateTree.chain(torch.tensor([[60], [61]])))
    expected = [[4, 8, 15, 1, 30, 31, 32, 50, 60], [16, 23, 42, 2, 51, 61]]
    for b, seq in enumerate(expected):
        assert (out.logits[b, 1] - sequential_logits(ref, seq)).abs().max() <= 1e-10
        assert (out.logits[b, 0] - sequential_logits(ref, seq[:-1])).abs().max() <= 1e-10


def test_hidden_states_on_request():
    model = tiny_random_model("llama", seed=0, dtype="float64")
    target = HFTarget(model, hidden_layers=(-1, 1))
    out = target.prefill(torch.tensor([[1, 2, 3]]))
    assert out.hidden.shape == (1, 3, 2, model.config.hidden_size)  # every prompt position (EAGLE catches up on them)
    out = target.forward_tree(torch.tensor([4]), CandidateTree.chain(torch.tensor([[5, 6]])))
    assert out.hidden.shape == (1, 3, 2, model.config.hidden_size)


def test_forward_costs_leave_the_cache_as_it_was():
    """The goodput policy measures the target between steps: timing forwards must change nothing after them."""
    model = tiny_random_model("llama", seed=0, dtype="float64")
    target = HFTarget(model)
    target.prefill(torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]]))
    root, tree = torch.tensor([7, 8]), CandidateTree.chain(torch.tensor([[1, 2], [3, 4]]))
    before = target.forward_tree(root, tree).logits
    target.lm.drop_pending()
    seconds = target.forward_costs((0, 1, 8), repeats=1)
    assert set(seconds) == {0, 1, 8} and all(s > 0 for s in seconds.values())
    assert torch.equal(target.forward_tree(root, tree).logits, before)
    with pytest.raises(ValueError, match="up to 254 nodes"):
        target.forward_costs((300,))
