"""A small slice of the stdlib corpus and a tokenizer trained on it, shared by the zoo tests."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from framework.data.sources import Document, tokenize_splits
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.tokenizer import train_tokenizer

SLICE = ["json", "textwrap.py", "string.py", "keyword.py", "colorsys.py", "bisect.py", "heapq.py"]


@pytest.fixture(scope="session")
def stdlib():
    return stdlib_files()


@pytest.fixture(scope="session")
def small_corpus(stdlib):
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = [p for p in stdlib if p.relative_to(root).parts[0] in SLICE]
    return build_corpus(paths, heldout_fraction=0.3, root=root)


@pytest.fixture(scope="session")
def small_tokenizer(small_corpus):
    return train_tokenizer(small_corpus["train"]["text"], vocab_size=512)


class CorpusRows:
    """A built corpus as a data source: its documents keyed by path, train rows (in path order) then held-out."""

    def __init__(self, corpus):
        self.corpus = corpus

    def documents(self):
        for split in ("train", "heldout"):
            for row in self.corpus[split]:
                yield Document(key=row["path"], text=row["text"])

    def describe(self) -> dict:
        return {"kind": "rows"}


@pytest.fixture(scope="session")
def small_streams(small_corpus, small_tokenizer):
    """The slice's token data: the corpus's own split (heldout_fraction 0.3), every 3rd training file to valid."""
    return tokenize_splits(CorpusRows(small_corpus), small_tokenizer, heldout_fraction=0.3, valid_every=3)
