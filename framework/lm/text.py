"""Prompts as text or token ids, and the tokenizer that travels with a checkpoint.

A model loaded with from_pretrained remembers its folder (config.name_or_path); a tokenizer saved
there (tokenizer.json) is the model's. Random-weight test models have none: they take token ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase


def tokenizer_of(model) -> PreTrainedTokenizerBase | None:
    """The tokenizer saved beside the model's checkpoint, or None (a model built from a config)."""
    return tokenizer_at(getattr(model.config, "name_or_path", "") or "")


def tokenizer_at(checkpoint: str) -> PreTrainedTokenizerBase | None:
    """The tokenizer saved in a checkpoint's folder, or None (no folder, or none saved there)."""
    folder = Path(checkpoint)
    if not str(folder) or not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        return None
    return AutoTokenizer.from_pretrained(str(folder))


def encode_prompt(prompt: str | Sequence[int], tokenizer: PreTrainedTokenizerBase | None) -> torch.Tensor:
    """[1, L] token ids from text (needs a tokenizer) or from a list of ids."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise ValueError("the prompt is text but the target has no tokenizer (no tokenizer.json beside its "
                             "checkpoint): give the prompt as a list of token ids")
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    else:
        ids = list(prompt)
        wrong = [t for t in ids if isinstance(t, bool) or not isinstance(t, int)]
        if wrong:
            raise ValueError(f"prompt token ids must be integers, got {wrong[:3]}")
    if not ids:
        raise ValueError("the prompt is empty")
    return torch.tensor([ids], dtype=torch.long)


def decode(tokens: Sequence[int], tokenizer: PreTrainedTokenizerBase | None) -> str | None:
    return None if tokenizer is None else tokenizer.decode(list(tokens))
