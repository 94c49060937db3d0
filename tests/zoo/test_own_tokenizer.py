"""A zoo model with `tokenizer_vocab_size` (and `tokenizer_sample`: a seeded fraction of the training files, so that
its merges and ids differ from the shared tokenizer's) trains on a tokenizer of its own; a teacher with it is refused
by name, before anything is made."""

from __future__ import annotations

import shutil
import sysconfig
from pathlib import Path

import pytest
import transformers
from hydra import compose, initialize_config_dir

from experiments.train import run
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.streams import sampled
from framework.zoo.tokenizer import train_tokenizer
from tests.test_configs import CONF

FILES = ["textwrap.py", "string.py", "keyword.py", "colorsys.py", "bisect.py", "heapq.py", "glob.py", "fnmatch.py"]
OWN = "training.models.draft_bpe"
TINY = ["training.only=[draft_bpe]", "training.vocab_size=320", f"{OWN}.tokenizer_vocab_size=300",
        f"{OWN}.tokenizer_sample=0.5",
        "training.num_threads=1", "training.calibrate=false", "training.corpus.heldout_fraction=0.3",
        "training.corpus.valid_every=3", f"{OWN}.train.steps=2", f"{OWN}.train.batch_size=2",
        "training.train.block_size=32", "training.train.long_block_size=null", "training.train.eval_tokens=64",
        "training.train.warmup=1", f"+{OWN}.config.hidden_size=32", f"+{OWN}.config.intermediate_size=64"]


def configured(tmp_path: Path, *more: str):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    corpus = tmp_path / "lib"
    corpus.mkdir(exist_ok=True)
    for name in FILES:
        shutil.copy(stdlib / name, corpus / name)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[
            "training=zoo", f"training.root={tmp_path / 'root'}", f"training.corpus.root={corpus}", *TINY, *more])


def test_a_model_with_its_own_tokenizer_trains_on_it(tmp_path):
    final = run(configured(tmp_path))["draft_bpe"]
    shared = transformers.AutoTokenizer.from_pretrained(tmp_path / "root" / "tokenizer")
    own = transformers.AutoTokenizer.from_pretrained(final)
    assert len(shared) == 320 and len(own) == 300
    made = transformers.AutoTokenizer.from_pretrained(tmp_path / "root" / "tokenizer_300_sample0.5")  # kept
    assert own.get_vocab() == made.get_vocab()
    texts = build_corpus(stdlib_files(tmp_path / "lib"), heldout_fraction=0.3)["train"]["text"]
    assert train_tokenizer(sampled(texts, 0.5), 300).get_vocab() == own.get_vocab()  # half the files, seed 1
    everything = train_tokenizer(texts, 300).get_vocab()  # what all the files give: other merges, other ids
    assert everything != own.get_vocab() and set(everything) != set(own.get_vocab())
    assert transformers.AutoConfig.from_pretrained(final).vocab_size == 300
    text = "def f(x):\n    return x\n"
    assert own.decode(own(text)["input_ids"]) == text and own(text)["input_ids"] != shared(text)["input_ids"]


def test_a_sample_is_a_seeded_fraction_of_the_files_in_order():
    texts = [f"file {i}" for i in range(10)]
    half = sampled(texts, 0.5)
    assert len(half) == 5 and half == sampled(texts, 0.5) and half == sorted(half, key=texts.index)
    assert sampled(texts, 0.5, seed=2) != half and sampled(texts, 1.0) == texts and len(sampled(texts, 0.01)) == 1
    with pytest.raises(ValueError, match=r"fraction of the training files in \(0, 1\], got 0"):
        sampled(texts, 0)


def test_a_teacher_with_an_own_tokenizer_is_refused_by_name(tmp_path):
    cfg = configured(tmp_path, f"+{OWN}.teacher=target")
    with pytest.raises(ValueError, match=r"'draft_bpe' has its own tokenizer .*teacher \('target'\)"):
        run(cfg)
    assert not (tmp_path / "root").exists()  # refused before any tokenizer or model was made
