"""Rows kept from speculating cost one position: the verification forward runs only the real inputs, packed
(framework/lm/packing.py), and every number a row reads is the dense forward's."""

from __future__ import annotations

import pytest
import torch

from framework.core.prompts import ragged_batch
from framework.core.sampling import SamplingConfig
from framework.core.side_rows import SideRows
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.lm.models import tiny_random_model
from framework.lm.packing import Packing
from framework.lm.target import HFTarget
from harness.ragged import TakingTurns, check_ragged_law
from proposers import DraftModelProposer
from tests.framework.test_ragged_prompts import STACKS

PROMPTS = [[5, 9, 2, 7, 11, 3, 8, 1, 2, 40, 3, 9], [7, 7], [30, 2, 11, 5, 6]]
SPECULATING = torch.tensor([True, False, True])


def test_packing_round_trips_the_real_inputs_and_zeros_the_rest():
    real = torch.tensor([[True, True, False], [True, False, False]])
    packing = Packing.of(real)
    dense = torch.arange(6.0).view(2, 3, 1)
    packed = packing.pack(dense)
    assert packed.shape == (1, 3, 1) and packed.flatten().tolist() == [0.0, 1.0, 3.0]
    assert packing.unpack(packed).flatten().tolist() == [0.0, 1.0, 0.0, 3.0, 0.0, 0.0]
    heads = torch.arange(6.0).view(1, 2, 3, 1)  # [1, H, T, D]
    assert packing.unpack_heads(heads)[:, 1, :, 0].tolist() == [[3.0, 4.0, 0.0], [5.0, 0.0, 0.0]]


def step_logits(model, speculating, hidden_layers=()):
    """Prefill ragged rows, verify a 5-node tree (only some rows' nodes read), commit a path, then a plain step."""
    target = HFTarget(model, hidden_layers=hidden_layers)
    target.prefill(ragged_batch(PROMPTS))
    shape = TreeShape(torch.tensor([-1, 0, 0, 1, 3]))
    tree = CandidateTree(torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12], [1, 2, 3, 4, 5]]), shape)
    first = target.forward_tree(torch.tensor([1, 2, 3]), tree, speculating=speculating)
    path = torch.tensor([[0, 2, 3], [-1, -1, -1], [1, -1, -1]])
    target.lm.keep_path(path, torch.tensor([3, 0, 1]))
    second = target.forward_tree(torch.tensor([4, 5, 6]), CandidateTree.empty(3, target.device))
    return first, second


@pytest.mark.parametrize("stack", STACKS)
def test_a_packed_forward_gives_the_rows_the_dense_forwards_numbers(stack):
    """On every stack (sliding windows, attention sinks, MLA, MoE, learned positions): the speculating rows' logits
    and hidden states, every row's root, and the next step after a commit are the dense forward's; the skipped
    nodes' logits are zeros (finite: the verifier never reads them)."""
    model = tiny_random_model(stack, dtype="float64")
    dense, dense_next = step_logits(model, None, hidden_layers=(1,))
    packed, packed_next = step_logits(model, SPECULATING, hidden_layers=(1,))
    torch.testing.assert_close(packed.logits[SPECULATING], dense.logits[SPECULATING])
    torch.testing.assert_close(packed.hidden[SPECULATING], dense.hidden[SPECULATING])
    torch.testing.assert_close(packed.logits[:, 0], dense.logits[:, 0])
    assert bool((packed.logits[1, 1:] == 0).all())
    torch.testing.assert_close(packed_next.logits, dense_next.logits)


def test_a_model_without_the_tree_attention_runs_every_input():
    """On the model's own attention (dense masks) nothing is packed: every node's logits are computed."""
    model = tiny_random_model("llama", dtype="float64")
    target = HFTarget(model, backend=None)
    target.prefill(ragged_batch(PROMPTS))
    tree = CandidateTree(torch.tensor([[3, 4], [8, 9], [1, 2]]), TreeShape(torch.tensor([-1, 0])))
    out = target.forward_tree(torch.tensor([1, 2, 3]), tree, speculating=SPECULATING)
    assert bool((out.logits[1, 1:] != 0).any())


def test_side_rows_run_for_every_row_beside_a_packed_tree():
    """A proposer's side rows (lookahead's window) that read the root only still run in every row; their logits are
    the dense forward's."""
    model = tiny_random_model("llama", dtype="float64")
    tree = CandidateTree(torch.tensor([[3, 4], [8, 9], [1, 2]]), TreeShape(torch.tensor([-1, 0])))
    side = SideRows(torch.tensor([[5, 6], [7, 8], [9, 10]]), torch.tensor([1, 2]),
                    torch.tensor([[True, False, False], [True, False, False]]),
                    torch.tensor([[True, False], [True, True]]))
    outs = []
    for speculating in (None, SPECULATING):
        target = HFTarget(model)
        target.prefill(ragged_batch(PROMPTS))
        outs.append(target.forward_tree(torch.tensor([1, 2, 3]), tree, side, speculating))
    dense, packed = outs
    assert bool((packed.logits[1, 1:] == 0).all())
    torch.testing.assert_close(packed.side_logits, dense.side_logits)
    torch.testing.assert_close(packed.logits[SPECULATING], dense.logits[SPECULATING])


class Misplaced(HFTarget):
    """Planted: the packed forward computes the nodes of the wrong rows (the flags shifted by one row)."""

    def forward_tree(self, root, tree, side=None, speculating=None):
        return super().forward_tree(root, tree, side, None if speculating is None else speculating.roll(1))


def test_rows_taking_turns_to_draft_decode_as_alone_in_law_and_a_misplaced_packing_is_caught():
    """Exact, T = 1: two prompts (7 tokens and 1, an EOS ending rows early) whose rows draft on alternate steps
    (per-row plans: packed forwards); the joint law of three tokens is the product of each prompt's own."""
    toy = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
    target, draft = tiny_random_model("llama", seed=0, **toy), tiny_random_model("llama", seed=1, **toy)
    prompts, t1 = [[1, 2, 0, 1, 1, 2, 0], [2]], SamplingConfig()
    law = lambda factory: check_ragged_law(target, lambda: DraftModelProposer(draft, depth=1), prompts, 3, t1, 2,  # noqa: E731
                                           policy_factory=TakingTurns, target_factory=factory)
    assert law(HFTarget).passes(1e-9)
    planted = law(Misplaced)
    assert not planted.passes(1e-9) and planted.tv > 1e-2, planted
