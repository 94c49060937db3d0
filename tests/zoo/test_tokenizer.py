from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from framework.zoo.tokenizer import EOS, save_tokenizer

FILES = ["os.py", "textwrap.py", "json/decoder.py", "locale.py", "encodings/cp1252.py"]
ODD = ["\tif x:\r\n\t\treturn  'é∑😀'  \n\n\n", "   trailing   ", "", "a\u00a0b\u200bc", "x  =  1 ;\n"]


@pytest.mark.parametrize("name", FILES)
def test_round_trips_stdlib_source(small_tokenizer, name):
    text = (Path(sysconfig.get_paths()["stdlib"]) / name).read_bytes().decode("utf-8")
    ids = small_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert small_tokenizer.decode(ids) == text
    assert len(ids) < len(text)  # it compresses


@pytest.mark.parametrize("text", ODD)
def test_round_trips_whitespace_and_unicode(small_tokenizer, text):
    assert small_tokenizer.decode(small_tokenizer(text, add_special_tokens=False)["input_ids"]) == text


def test_saved_tokenizer_loads_with_auto_tokenizer(small_tokenizer, tmp_path):
    save_tokenizer(small_tokenizer, tmp_path)
    assert (tmp_path / "tokenizer.json").exists()
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "def f(x):\n    return x  # ok\n"
    assert loaded(text)["input_ids"] == small_tokenizer(text)["input_ids"]
    assert loaded.eos_token == loaded.bos_token == EOS and len(loaded) == len(small_tokenizer) == 512
