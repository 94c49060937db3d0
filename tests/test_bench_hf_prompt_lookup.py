"""experiments.bench_hf_prompt_lookup end to end on the embedded zoo (one prompt, a few tokens)."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.bench_hf_prompt_lookup import run, table

CONF = Path(__file__).resolve().parents[1] / "conf"
METHODS = ["ours_plain", "ours_pld", "hf_plain", "hf_pld", "hf_pld_defaults"]


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="bench_hf_prompt_lookup", overrides=list(overrides))


def test_four_methods_agree_and_report(tmp_path):
    result = run(load("experiment.per_category=1", "experiment.max_new_tokens=8", "experiment.categories=[repetition_editing]",
                      "experiment.warmup=0",  # timing is not checked here
                      "proposer.num_tokens=10", "proposer.max_ngram=3",  # what transformers' K, M mirror
                      f"output_dir={tmp_path}"))
    assert result["methods"] == METHODS  # K=10, M=3 differ from transformers' defaults (M=2): both timed
    assert result["settings"]["hf_attention"] in ("sdpa", "eager") and result["settings"]["ours_attention"] == "speculum_tree"
    assert result["settings"]["hf_variants"]["hf_pld"] == {"num_tokens": 10, "max_ngram": 3}
    [row] = result["rows"]
    assert row["category"] == "repetition_editing" and row["prompts"] == 1
    assert row["mismatched_prompts"] == 0 and row["mismatches"] == []  # greedy: the same tokens from all
    assert row["tokens"] == dict.fromkeys(METHODS, 8)
    assert row["forwards"]["ours_plain"] == row["forwards"]["hf_plain"] == 8  # prefill + 7 steps
    assert all(1 <= row["forwards"][m] <= 8 for m in METHODS)
    assert row["tokens_per_forward"]["ours_plain"] == row["tokens_per_forward"]["hf_plain"] == 1.0
    assert row["ours_pld_tokens_per_forward_stats"] >= 1.0
    assert sum(row["ours_pld_split"].values()) == pytest.approx(1.0)
    for key in ("ours_speedup", "hf_speedup", "pld_ours_vs_hf", "plain_ours_vs_hf", "hf_defaults_speedup"):
        assert row[key] > 0
    assert row["pld_ours_vs_hf"] == pytest.approx(row["seconds"]["hf_pld"] / row["seconds"]["ours_pld"])
    written = json.loads((tmp_path / "bench_hf_prompt_lookup.json").read_text())
    assert written["rows"] == result["rows"]
    assert "HF PLD (K=10, M=3)" in table(result)


def test_needs_greedy_and_a_proposer(tmp_path):
    with pytest.raises(ValueError, match="greedy"):
        run(load("sampling=t1", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="give one"):
        run(load("proposer=none", f"output_dir={tmp_path}"))
