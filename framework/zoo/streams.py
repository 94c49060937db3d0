"""The zoo's tokenizer and token data, made once from the corpus and reused by every training run."""

from __future__ import annotations

from pathlib import Path

from framework.core import files
from framework.data.sources import cached_splits
from framework.data.token_data import TokenData
from framework.zoo.corpus import StdlibCorpus, build_corpus, stdlib_files
from framework.zoo.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer


def tokenizer_and_streams(exp, root: Path) -> tuple[object, dict[str, TokenData]]:
    """root/tokenizer (trained on the corpus's train split on the first call, swapped in whole) and the
    corpus's token data for it (framework/data: int32, its tokenizer recorded, made once into root/data)."""
    files.recover_folder(root / "tokenizer")
    if not (root / "tokenizer" / "tokenizer.json").exists():
        corpus = build_corpus(stdlib_files(exp.corpus.root), heldout_fraction=exp.corpus.heldout_fraction)
        with files.replacing_folder(root / "tokenizer") as temporary:
            save_tokenizer(train_tokenizer(corpus["train"]["text"], exp.vocab_size), temporary)
    tokenizer = load_tokenizer(root / "tokenizer")
    return tokenizer, cached_splits(StdlibCorpus(exp.corpus.root), tokenizer, root, exp.corpus.heldout_fraction,
                                    exp.corpus.valid_every)
