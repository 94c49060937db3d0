"""Prompts of different lengths in one batch: the forms users give them in, what is refused, and a planted bug
the ragged law check catches (the law of every method: tests/proposers/test_proposer_contract.py)."""

from __future__ import annotations

import pytest
import torch

from engine.loop import DecodeOptions, generate
from engine.scheduler import Request, Scheduler
from framework.core.prompts import ragged_batch
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.ragged import check_ragged_law
from proposers import DraftModelProposer

GREEDY = SamplingConfig(temperature=0)
LONG, SHORT = [5, 9, 2, 7, 11, 3, 8, 1, 2, 40, 3, 9, 30, 2, 11, 5, 6, 7, 8, 10], [7, 7]


def test_a_list_and_either_padding_give_the_same_rows():
    left = torch.tensor([[0] * 18 + SHORT, LONG])
    right = torch.tensor([SHORT + [0] * 18, LONG])
    mask = lambda ids, n: torch.tensor([[int(i >= 18) for i in range(20)] if n else [int(i < 2) for i in range(20)],  # noqa: E731
                                        [1] * 20])
    expected = ragged_batch([SHORT, LONG])
    assert expected[0].tolist() == SHORT + [-1] * 18
    assert ragged_batch(left, mask(left, 1)).tolist() == expected.tolist()
    assert ragged_batch(right, mask(right, 0)).tolist() == expected.tolist()


def test_each_row_of_different_lengths_decodes_as_alone_and_a_finished_row_leaves():
    """Greedy, plain and with a draft model, prompts 10x apart and an EOS that ends the short row early."""
    model = tiny_random_model("llama", dtype="float64")
    alone = [generate(HFTarget(model), None, [p], 16, GREEDY).tokens[0] for p in (LONG, SHORT)]
    eos = int(alone[1][3])
    for proposer in (None, DraftModelProposer(tiny_random_model("llama", dtype="float64", seed=1), depth=3)):
        batch = generate(HFTarget(model), proposer, [LONG, SHORT], 16, GREEDY,
                         options=DecodeOptions(eos_token_id=eos)).tokens
        for row, tokens in enumerate(alone):
            cut = (tokens == eos).nonzero()
            end = int(cut[0]) + 1 if len(cut) else len(tokens)
            assert batch[row, :end].tolist() == tokens[:end].tolist(), (proposer, row)
            assert bool((batch[row, end:] == -1).all())


@pytest.mark.parametrize("prompts, message", [
    ([[1, 2], []], "row 1 is empty"),
    ([[1, 2], [3, -1, 4]], "-1 between its tokens"),
    (torch.tensor([[1, -1], [-1, 2]]), "row 1 is empty"),
    (torch.tensor([[1, -3]]), "must be >= 0"),
    ([[1, 2], [[3]]], "1-D sequence"),
    ("1 2 3", "LongTensor"),
])
def test_a_bad_batch_is_named(prompts, message):
    with pytest.raises(ValueError, match=message):
        generate(HFTarget(tiny_random_model("llama")), None, prompts, 3)


def test_a_row_longer_than_the_context_is_named():
    model = tiny_random_model("llama", max_positions=32)
    with pytest.raises(ValueError, match="row 1 .*30 tokens.*context of 32"):
        generate(HFTarget(model), None, [[1, 2], list(range(30))], 4)


class PaddingSeen(HFTarget):
    """Planted: the prefill takes the -1 padding for tokens (id 0), so a shorter prompt decodes after pad tokens."""

    def prefill(self, input_ids):
        return super().prefill(input_ids.clamp_min(0))


def test_the_ragged_law_check_catches_padding_the_model_sees():
    target = tiny_random_model("llama", vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                               dtype="float64", init_std=0.3, seed=0)
    prompts, t1 = [[1, 2, 0, 1], [2]], SamplingConfig()
    assert check_ragged_law(target, None, prompts, 2, t1, 2).passes(1e-9)
    planted = check_ragged_law(target, None, prompts, 2, t1, 2, target_factory=PaddingSeen)
    assert not planted.passes(1e-9) and planted.tv > 1e-3, planted


STACKS = ["llama3", "qwen3", "qwen3_moe", "mixtral", "mistral", "gemma3", "gpt_oss", "deepseek_v3", "gpt2"]


@pytest.mark.parametrize("stack", STACKS)
def test_rows_of_different_lengths_and_joined_requests_decode_as_alone_on_every_stack(stack):
    """Greedy, float64, a window of 8 where the stack has one (prompts and outputs run past it): a batch of prompts
    4x apart with a draft tree, and requests joining a running batch, each equal to the request alone."""
    window = {"sliding_window": 8} if stack in ("mixtral", "mistral", "gemma3", "gpt_oss") else {}
    model = tiny_random_model(stack, dtype="float64", **window)
    draft = tiny_random_model(stack, dtype="float64", seed=1, **window)
    prompts = [LONG[:16], SHORT + [3, 9], LONG[4:8]]
    alone = [generate(HFTarget(model), None, [p], 14, GREEDY).tokens[0].tolist() for p in prompts]
    make = lambda: DraftModelProposer(draft, depth=2, branching=2, kind="point")  # noqa: E731
    assert generate(HFTarget(model), make(), prompts, 14, GREEDY).tokens.tolist() == alone
    done = Scheduler(model, make, GREEDY, max_batch=2).run([Request(p, b) for p, b in zip(prompts, (14, 5, 14))])
    assert [f.tokens for f in done] == [alone[0], alone[1][:5], alone[2]]


def test_a_hybrid_target_decodes_ragged_rows_and_refuses_a_join_by_name():
    model = tiny_random_model("qwen3_next", dtype="float64")
    prompts = [LONG[:12], SHORT]
    alone = [generate(HFTarget(model), None, [p], 6, GREEDY).tokens[0].tolist() for p in prompts]
    assert generate(HFTarget(model), None, prompts, 6, GREEDY).tokens.tolist() == alone
    with pytest.raises(ValueError, match="recurrent layers"):  # the third request would join the first
        Scheduler(model, None, GREEDY, max_batch=2).run([Request(prompts[0], 6), Request(prompts[1], 1),
                                                         Request(SHORT, 3)])
