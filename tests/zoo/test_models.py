from __future__ import annotations

import torch
import transformers

from framework.zoo.models import draft_config, target_config


def n_params(config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())


def test_sizes_match_the_issue():
    target, draft = target_config(6144), draft_config(6144)
    assert 6 <= target.num_hidden_layers <= 8 and draft.num_hidden_layers == 1
    assert n_params(target) == 8_654_592 and 5e6 <= n_params(target) <= 15e6  # stated in models.py
    assert n_params(draft) == 3_932_928
    assert draft.vocab_size == target.vocab_size
