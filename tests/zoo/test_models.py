from __future__ import annotations

from pathlib import Path

import torch
import transformers
from hydra.utils import instantiate
from omegaconf import OmegaConf

from framework.zoo.models import draft_config, multiply_adds_per_token, target_config


def n_params(config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())


def test_sizes_match_the_issue():
    target, draft = target_config(6144), draft_config(6144)
    assert target.num_hidden_layers >= 16 and target.hidden_size == 256 and draft.num_hidden_layers == 1
    assert target.num_key_value_heads < target.num_attention_heads  # GQA
    assert n_params(target) == 16_918_784  # stated in models.py
    assert n_params(draft) == 3_932_928
    assert 2 * (n_params(target) + n_params(draft)) < 43e6  # bf16 pair + two 0.4 MB tokenizers within 45 MB
    assert draft.vocab_size == target.vocab_size


def test_the_cpu_sized_draft_recipe_is_within_an_eighth_of_the_target():
    """conf/training/zoo.yaml's draft_small (issue 13: at most 1/8 of the target's per-token compute)."""
    models = OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "training" / "zoo.yaml").models
    target = multiply_adds_per_token(target_config(6144))
    small = multiply_adds_per_token(instantiate(models.draft_small.config)(6144))
    assert small <= target / 8 < multiply_adds_per_token(draft_config(6144))  # the committed draft is 1/6.5
    assert target == 20 * (2 * 256 * 256 + 2 * 256 * 128 + 3 * 256 * 640) + 256 * 6144
