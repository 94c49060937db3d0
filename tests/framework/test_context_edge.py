"""Decoding up to the last position of the context: drafts are cut to the room left (and to the tokens
still wanted) before the target sees them, so every proposer decodes there, greedy as plain greedy."""

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from framework import SamplingConfig
from framework.engine import generate
from framework.target import HFTarget

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY = sorted(p.stem for p in (CONF / "proposer").glob("tiny_*.yaml")) + ["lookahead", "prompt_lookup"]


def tiny(proposer: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["target=tiny_llama", f"proposer={proposer}"])
    return instantiate(cfg.target), instantiate(cfg.proposer)


@pytest.mark.parametrize("proposer", TINY)
def test_the_last_position_of_the_context_is_reached(proposer):
    model, make = tiny(proposer)
    target = HFTarget(model)
    new = 7
    prompt = torch.randint(1, 60, (1, target.max_positions - new), generator=torch.Generator().manual_seed(0))
    plain = generate(target, None, prompt, new, SamplingConfig(temperature=0))
    spec = generate(target, make(), prompt, new, SamplingConfig(temperature=0))
    assert torch.equal(spec.tokens, plain.tokens) and bool((spec.tokens >= 0).all())
    sampled = generate(target, make(), prompt, new, SamplingConfig(temperature=1.0), seed=1)
    assert bool((sampled.tokens >= 0).all())


def test_no_draft_reaches_past_the_tokens_still_wanted():
    """The last steps verify no more nodes than can still be emitted: a chain of 4 asked for 6 tokens
    verifies at most 5 drafts in all (prefill gives the first token), never a 4-node tree past the budget."""
    model, make = tiny("tiny_draft")
    target = HFTarget(model)
    out = generate(target, make(), torch.tensor([[1, 2, 3]]), 6, SamplingConfig(temperature=0))
    wanted = 5  # tokens still wanted after the prefill's
    for step in out.stats.steps:
        assert step.nodes <= wanted - 1  # one token of each step is the target's own
        wanted -= int(step.accepted) + 1
