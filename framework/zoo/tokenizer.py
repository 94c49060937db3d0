"""A byte-level BPE tokenizer for Python source, trained with `tokenizers`.

Byte-level with no prefix space: every byte sequence has a spelling and decode(encode(s)) == s
exactly, whitespace, tabs, "\r\n" and non-ASCII included. One special token serves as both BOS
and EOS (it separates files when text is packed into blocks).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

EOS = "<|endoftext|>"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 6144) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # all 256 bytes, seen or not
    tok.train_from_iterator(texts, trainer)
    return wrap(tok)


def wrap(tok: Tokenizer) -> PreTrainedTokenizerFast:
    # clean_up_tokenization_spaces would rewrite " ." to "." on decode and break round trips
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS,
                                   clean_up_tokenization_spaces=False)


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, directory: str | Path) -> Path:
    """Writes tokenizer.json (+ tokenizer_config.json) so AutoTokenizer can load the folder."""
    tokenizer.save_pretrained(str(directory))
    return Path(directory)


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    return AutoTokenizer.from_pretrained(str(directory))
