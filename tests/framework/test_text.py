"""Prompts as text or ids; the tokenizer found beside a checkpoint, none for config-built models."""

import pytest
import torch

from framework.lm.models import tiny_random_model
from framework.lm.text import decode, encode_prompt, tokenizer_of
from framework.zoo.checkpoints import load_causal_lm


def test_ids_pass_through_and_text_needs_a_tokenizer():
    model = tiny_random_model()
    assert tokenizer_of(model) is None
    assert torch.equal(encode_prompt([3, 1, 2], None), torch.tensor([[3, 1, 2]]))
    with pytest.raises(ValueError, match="no tokenizer"):
        encode_prompt("def f():", None)
    with pytest.raises(ValueError, match="empty"):
        encode_prompt([], None)
    assert decode([1, 2], None) is None


def test_zoo_checkpoint_carries_its_tokenizer():
    model = load_causal_lm("draft")
    tokenizer = tokenizer_of(model)
    text = "def f(x):\n\treturn x  # ünïcode\n"
    ids = encode_prompt(text, tokenizer)
    assert ids.shape[0] == 1 and decode(ids[0].tolist(), tokenizer) == text
    assert not model.training and model.dtype == torch.float32
