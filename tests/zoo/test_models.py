from __future__ import annotations

import torch
import transformers

from framework.zoo.models import draft_config, target_config


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
