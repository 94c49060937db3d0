"""A small slice of the stdlib corpus and a tokenizer trained on it, shared by the zoo tests."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

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
