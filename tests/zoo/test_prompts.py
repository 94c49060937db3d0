"""Prompt sets: deterministic, 20-80 per category, cut from held-out files; zoo_quality's scoring on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch
import transformers

from experiments.zoo_quality import (
    agreement,
    bits_per_char,
    score,
    tokens_per_forward,
    windows,
)
from framework.zoo.corpus import build_corpus
from framework.zoo.models import llama_config
from framework.zoo.prompts import (
    CATEGORIES,
    LONG_CHARS,
    MAX_CHARS,
    build_prompt_sets,
    rename,
)


@pytest.fixture(scope="module")
def heldout(stdlib):
    return build_corpus(stdlib)["heldout"]  # the zoo's real split (5%)


@pytest.fixture(scope="module")
def prompt_sets(heldout):
    return build_prompt_sets(heldout)


def test_two_builds_are_equal_and_seed_matters(heldout, prompt_sets):
    again = build_prompt_sets(heldout.shuffle(seed=1))  # input order must not matter
    assert all(prompt_sets[c].to_list() == again[c].to_list() for c in CATEGORIES)
    other = build_prompt_sets(heldout, seed=1)
    assert any(prompt_sets[c].to_list() != other[c].to_list() for c in CATEGORIES)


def test_each_category_has_20_to_80_prompts_within_size(prompt_sets):
    assert list(prompt_sets) == list(CATEGORIES)
    for category, rows in prompt_sets.items():
        assert 20 <= len(rows) <= 80, (category, len(rows))
        assert len(set(rows["id"])) == len(rows)
        assert set(rows["category"]) == {category}
        limit = LONG_CHARS if category == "long_context_retrieval" else MAX_CHARS
        assert all(0 < len(p) <= limit for p in rows["prompt"]), category
        assert all(r.strip() for r in rows["reference"]), category


def test_prompts_come_from_heldout_files(heldout, prompt_sets):
    text = dict(zip(heldout["path"], heldout["text"]))
    for category, rows in prompt_sets.items():
        for row in rows:
            source = text[row["source_path"]]
            if category in ("code_continuation", "function_body"):
                assert row["prompt"] + row["reference"] in source
            elif category == "repetition_editing":  # the original block, then its renamed copy
                original = row["prompt"].split("\n\n")[0]
                assert original.split("\n")[0] in source and "# Rewrite the function above" in row["prompt"]
            else:  # the re-opened function, head and rest, appears whole earlier in the context
                head = row["prompt"].rsplit("(again)\n", 1)[1]
                assert head + row["reference"] in row["prompt"] and head + row["reference"] in source


def test_repetition_answer_is_the_original_renamed(prompt_sets):
    for row in prompt_sets["repetition_editing"]:
        old, new = row["id"].rsplit(":", 1)[1], row["prompt"].split("` to `")[1].split("`")[0]
        block, rest = row["prompt"].split("# Rewrite the function above", 1)
        opened = rest.split("change nothing else.\n", 1)[1]
        renamed = rename(block.rstrip(" \t")[:-1], old, new)  # drop the blank line before the comment
        assert renamed == opened + row["reference"] and renamed != block and old in block


@pytest.fixture(scope="module")
def tiny_model(small_tokenizer):
    torch.manual_seed(0)
    config = llama_config(len(small_tokenizer), num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=1,
                          intermediate_size=64, max_positions=256)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def test_quality_core_on_a_tiny_random_model(small_corpus, small_tokenizer, tiny_model):
    texts = small_corpus["heldout"]["text"][:2]
    pieces = windows(small_tokenizer, texts, window=64)
    targets = sum(len(ids) for ids in small_tokenizer(texts, add_special_tokens=False)["input_ids"])
    assert all(2 <= len(p.ids) <= 65 and p.scored == len(p.ids) - 1 for p in pieces)
    scores = score(tiny_model, pieces)
    assert scores.tokens == targets  # every token once, the first predicted from EOS
    bpc = bits_per_char(scores, texts)
    assert math.isfinite(bpc) and bpc > 0
    assert agreement(scores, score(tiny_model, pieces)) == 1.0

    sliding = windows(small_tokenizer, texts, window=64, stride=16)
    scored = torch.cat([p.ids[-p.scored:] for p in sliding])  # every target once, in order
    assert scored.tolist() == [t for ids in small_tokenizer(texts, add_special_tokens=False)["input_ids"] for t in ids]
    assert all(len(p.ids) - 1 - p.scored >= 64 - 16 for p in sliding if p.ids[0] != small_tokenizer.eos_token_id)
    assert math.isfinite(bits_per_char(score(tiny_model, sliding), texts))
    with pytest.raises(ValueError, match="stride"):
        windows(small_tokenizer, texts, window=64, stride=65)


def test_tokens_per_forward_of_a_model_drafting_for_itself(small_tokenizer, tiny_model):
    """Greedy, the draft equal to the target: every draft is accepted, depth + 1 tokens a forward."""
    prompts = ["def f(x):\n    return x\n", "import os\n"]
    assert tokens_per_forward(tiny_model, tiny_model, small_tokenizer, prompts, depth=3, max_new_tokens=17) == 4.0
