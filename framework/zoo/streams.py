"""The zoo's tokenizer and token data, made once from the corpus and reused by every training run."""

from __future__ import annotations

import random
from pathlib import Path

from framework.core import files
from framework.data.sources import cached_splits
from framework.data.token_data import TokenData
from framework.zoo.corpus import StdlibCorpus, build_corpus, stdlib_files
from framework.zoo.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

SAMPLE_SEED = 1  # picks the files of a `sample` (the same ones on every machine with the same corpus)


def sampled(texts: list[str], fraction: float, seed: int = SAMPLE_SEED) -> list[str]:
    """`fraction` of `texts` (a split's files, in path order), at least one, picked by random.Random(seed), in order."""
    if not 0 < fraction <= 1:
        raise ValueError(f"a tokenizer sample is a fraction of the training files in (0, 1], got {fraction}")
    picked = random.Random(seed).sample(range(len(texts)), max(1, round(fraction * len(texts))))
    return [texts[i] for i in sorted(picked)]


def tokenizer_and_streams(exp, root: Path, vocab_size: int | None = None,
                          sample: float | None = None) -> tuple[object, dict[str, TokenData]]:
    """root/tokenizer (exp.vocab_size), or with `vocab_size` and/or `sample` a model's own
    root/tokenizer_<vocab_size>[_sample<sample>], trained on the corpus's train split (with `sample`, that fraction
    of its files: BPE on the same texts learns the same merges in the same order, so a smaller vocabulary would be
    the shared one's first ids) on the first call and swapped in whole, and the corpus's token data for it, the
    whole split (framework/data: int32, its tokenizer recorded, made once into root/data: the file name hashes it)."""
    own = vocab_size is not None or sample is not None
    size = vocab_size or exp.vocab_size
    folder = root / (f"tokenizer_{size}" + ("" if sample is None else f"_sample{sample}") if own else "tokenizer")
    files.recover_folder(folder)
    if not (folder / "tokenizer.json").exists():
        corpus = build_corpus(stdlib_files(exp.corpus.root), heldout_fraction=exp.corpus.heldout_fraction)
        texts = corpus["train"]["text"]
        with files.replacing_folder(folder) as temporary:
            save_tokenizer(train_tokenizer(texts if sample is None else sampled(texts, sample), size), temporary)
    tokenizer = load_tokenizer(folder)
    return tokenizer, cached_splits(StdlibCorpus(exp.corpus.root), tokenizer, root, exp.corpus.heldout_fraction,
                                    exp.corpus.valid_every)
