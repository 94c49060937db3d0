"""The zoo's tokenizer and token streams, made once from the corpus and reused by every training run."""

from __future__ import annotations

from pathlib import Path

from framework.core import files
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer
from framework.zoo.train import tokenize_splits


def tokenizer_and_streams(exp, root: Path):
    """root/tokenizer and root/tokens.pt, made from the corpus on the first call. Both are written whole
    (a folder swapped in, a file renamed); a tokens.pt that does not load is moved aside and made again."""
    files.recover_folder(root / "tokenizer")
    has_tokenizer = (root / "tokenizer" / "tokenizer.json").exists()
    streams = files.load_torch(root / "tokens.pt", "the zoo's token streams") if has_tokenizer else None
    if streams is not None:
        return load_tokenizer(root / "tokenizer"), streams
    corpus = build_corpus(stdlib_files(exp.corpus.root), heldout_fraction=exp.corpus.heldout_fraction)
    if not has_tokenizer:
        with files.replacing_folder(root / "tokenizer") as temporary:
            save_tokenizer(train_tokenizer(corpus["train"]["text"], exp.vocab_size), temporary)
    tokenizer = load_tokenizer(root / "tokenizer")
    streams = tokenize_splits(tokenizer, corpus, exp.corpus.valid_every)
    files.save_torch(streams, root / "tokens.pt")
    return tokenizer, streams
