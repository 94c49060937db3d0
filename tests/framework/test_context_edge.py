"""Decoding up to the last position of the context: drafts are cut to the room left (and to the tokens
still wanted) before the target sees them, so every proposer decodes there, greedy as plain greedy."""

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from engine.loop import DecodeOptions, generate
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from tests.composed import REPRESENTATIVES

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY = sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")  # every method, on models=tiny
# by default one method of each way of reading the target, and those that keep a context of their own (a draft
# model's cache, a mix of parts, a suffix trie); every method under -m slow
EDGE_DEFAULT = {*REPRESENTATIVES, "draft", "cross_vocab", "mix_draft", "suffix"}


def tiny(proposer: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["models=tiny", f"proposer={proposer}"])
    return instantiate(cfg.target), instantiate(cfg.proposer)


@pytest.mark.parametrize("proposer", [p if p in EDGE_DEFAULT else pytest.param(p, marks=pytest.mark.slow)
                                      for p in TINY])
def test_the_last_position_of_the_context_is_reached(proposer):
    """One row, and three rows whose speeds differ: a row that finishes first leaves the batch (it kept
    growing past the context while the others decoded: 14 of 20 batches of the draft model crashed)."""
    model, make = tiny(proposer)
    target = HFTarget(model)
    new = 7
    for rows in (1, 3):
        prompt = torch.randint(1, 60, (rows, target.max_positions - new), generator=torch.Generator().manual_seed(rows))
        plain = generate(target, None, prompt, new, SamplingConfig(temperature=0))
        spec = generate(target, make(), prompt, new, SamplingConfig(temperature=0))
        assert torch.equal(spec.tokens, plain.tokens) and bool((spec.tokens >= 0).all())
        for seed in range(3):
            sampled = generate(target, make(), prompt, new, SamplingConfig(temperature=1.0), seed=seed)
            assert bool((sampled.tokens >= 0).all())


def test_a_finished_row_leaves_the_batch_and_the_others_decode_as_alone():
    """Greedy rows of one batch, one ending at its EOS early: each row's tokens are what it decodes alone."""
    model, make = tiny("draft")
    target = HFTarget(model)
    prompts = torch.tensor([[5, 9, 2, 7], [1, 2, 3, 4], [8, 8, 1, 3]])
    alone = [generate(target, make(), prompts[b : b + 1], 12, SamplingConfig(temperature=0)).tokens[0]
             for b in range(3)]
    eos = int(alone[1][2])  # row 1 stops at its third token
    batch = generate(target, make(), prompts, 12, SamplingConfig(temperature=0),
                     options=DecodeOptions(eos_token_id=eos))
    for b in range(3):
        cut = (alone[b] == eos).nonzero()
        end = int(cut[0]) + 1 if cut.numel() else 12
        assert batch.tokens[b, :end].tolist() == alone[b][:end].tolist() and bool((batch.tokens[b, end:] == -1).all())


def test_no_draft_reaches_past_the_tokens_still_wanted():
    """The last steps verify no more nodes than can still be emitted: a chain of 4 asked for 6 tokens
    verifies at most 5 drafts in all (prefill gives the first token), never a 4-node tree past the budget."""
    model, make = tiny("draft")
    target = HFTarget(model)
    out = generate(target, make(), torch.tensor([[1, 2, 3]]), 6, SamplingConfig(temperature=0))
    wanted = 5  # tokens still wanted after the prefill's
    for step in out.stats.steps:
        assert step.nodes <= wanted - 1  # one token of each step is the target's own
        wanted -= int(step.accepted) + 1
