"""The acceptance tables the tree search reads and the docs quote, against an independent computation: one prefix at
a time, the target's own forward (transformers, no cache) for its greedy token and the head run afresh on that
prefix, with the index relation written out here. Reading the teacher one position late changes every entry
(issue 52, finding 3)."""

from __future__ import annotations

import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers.eagle.head import random_head
from proposers.eagle.training import accuracy as eagle_accuracy
from proposers.medusa.heads import random_heads
from proposers.medusa.training import accuracy as medusa_accuracy

RANKS = 3


def fixture():
    """A tiny target and windows of its own greedy text after two prompts: [2, 18], scored from position 3 on."""
    target = tiny_random_model("llama", seed=2, dtype="float32", init_std=0.3)
    prompts = torch.tensor([[5, 9, 2, 7], [11, 3, 3, 40]])
    text = generate(HFTarget(target), None, prompts, 14, SamplingConfig(temperature=0)).tokens
    target = tiny_random_model("llama", seed=2, dtype="float32", init_std=0.3)  # a copy on its own attention
    return target, torch.cat([prompts, text], dim=1), prompts.shape[1] - 1


def greedy_after(target, prefix: torch.Tensor) -> int:
    with torch.no_grad():
        return int(target(prefix[None]).logits[0, -1].argmax())


def test_medusa_table_is_each_heads_rank_of_the_targets_next_token():
    """Head k at position t proposes token t + k + 2; the target's own token there follows prefix [..t+k+1]."""
    target, windows, start = fixture()
    heads = random_heads(32, 64, 3, seed=1, scale=3.0)
    table = medusa_accuracy(heads, target, windows, RANKS, False, start=start)
    hits, counts = torch.zeros(3, RANKS, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    for window in windows:
        for t in range(start, len(window)):
            with torch.no_grad():
                hidden = target(window[None, : t + 1], output_hidden_states=True).hidden_states[-1][0, -1]
                ranked = heads(hidden[None].float())[0].topk(RANKS, dim=-1).indices  # [K, R]
            for k in range(3):
                if t + k + 2 < len(window):
                    teacher = greedy_after(target, window[: t + k + 2])
                    hits[k] += (ranked[k] == teacher).double()
                    counts[k] += 1
    assert torch.allclose(torch.tensor(table["accept"], dtype=torch.float64), hits / counts[:, None], atol=1e-12)
    assert (hits[:, 0] > 0).any()  # the table is not all zeros: the check can tell a late teacher apart


def test_eagle_depth_one_is_the_heads_rank_of_the_targets_next_token():
    """Depth 1 at position t: the head reads the target's features up to t and token t + 1, proposing token t + 2."""
    target, windows, start = fixture()
    head = random_head(32, 64, 2, (0, 1, 2), "eagle3", seed=1, scale=3.0)
    table = eagle_accuracy(head, target, windows, RANKS, 2, start=start)
    embed, lm_head = head.embedding(target.get_input_embeddings()), target.get_output_embeddings()
    hits, count = torch.zeros(RANKS, dtype=torch.float64), 0
    for window in windows:
        for t in range(start, len(window) - 2):
            prefix = window[: t + 1]
            with torch.no_grad():
                states = target(prefix[None], output_hidden_states=True).hidden_states
                features = head.fused(torch.stack([states[i] for i in (0, 1, 2)], dim=2))  # [1, t+1, H]
                causal = torch.ones(t + 1, t + 1, dtype=torch.bool).tril()[None, None]
                h = head(embed(window[None, 1 : t + 2]), features, torch.arange(t + 1)[None], None,
                         attention_mask=causal)
                ranked = head.logits(h[0, -1], lm_head).topk(RANKS).indices
            hits += (ranked == greedy_after(target, window[: t + 2])).double()
            count += 1
    assert torch.allclose(torch.tensor(table["accept"][0], dtype=torch.float64), hits / count, atol=1e-12)
    assert hits[0] > 0
