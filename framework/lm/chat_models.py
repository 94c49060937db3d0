"""A tiny chat model saved as a real one is: random weights, its own 40k-token tokenizer, a chat template.

What the training pipeline meets on a user's target and never on the zoo's: ids past int16, a
tokenizer that is not the zoo's, special turn tokens and a template. The tokenizer is byte-level
BPE whose merges are pairs of printable characters in a seeded order, so ordinary text uses ids
all over the 40k range without training a tokenizer on a large corpus.
"""

from __future__ import annotations

import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from framework.lm.models import tiny_random_model

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# ChatML, with BOS written once by the template
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def pair_tokenizer(vocab_size: int = 40_000, seed: int = 0) -> PreTrainedTokenizerFast:
    """Byte-level BPE of `vocab_size` tokens (specials included): the 256 bytes, then merged character pairs."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    base = sorted(alphabet)
    printable = [c for c in base if c.isalnum() or c in "Ġ.,:;!?()'\"-_=+*/"]  # Ġ: a space in byte-level spelling
    pairs = [(a, b) for a in printable for b in printable]
    random.Random(seed).shuffle(pairs)
    merges = pairs[: vocab_size - len(base) - len(SPECIALS)]
    if len(base) + len(merges) + len(SPECIALS) != vocab_size:
        raise ValueError(f"at most {len(base) + len(pairs) + len(SPECIALS)} tokens from character pairs, "
                         f"asked {vocab_size}")
    vocab = {token: i for i, token in enumerate(base + [a + b for a, b in merges])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIALS[0], eos_token=SPECIALS[2],
                                   pad_token=SPECIALS[0], clean_up_tokenization_spaces=False)


def save_tiny_chat_target(folder: str | Path, vocab_size: int = 40_000, hidden_size: int = 32, num_layers: int = 4,
                          seed: int = 0) -> Path:
    """A random-weight Llama with the pair tokenizer and the ChatML template, saved to `folder`."""
    folder = Path(folder)
    tokenizer = pair_tokenizer(vocab_size, seed)
    tokenizer.chat_template = CHAT_TEMPLATE
    model = tiny_random_model("llama", vocab_size=len(tokenizer), hidden_size=hidden_size, num_layers=num_layers,
                              max_positions=512, seed=seed)
    model.config.bos_token_id, model.config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
