"""experiments.rules: every (proposer, sampling, verifier) cell measured on the same prompts, rows kept as they come."""

import json

import pytest
from hydra import compose, initialize_config_dir

from experiments.rules import measure, table
from experiments.bench_hf import CONF


def load(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="rules", overrides=list(overrides))


def test_every_cell_is_measured_and_kept(tmp_path):
    cfg = load("experiment.proposers=[zoo_draft]", "experiment.samplings=[t1]", "experiment.verifiers=[token,typical]",
               "experiment.prompts=1", "experiment.max_new_tokens=4",
               "~experiment.variants", "+experiment.variants={short: {config: zoo_draft, set: {gamma: 2, adaptive_depth: 0}}}")
    rows = measure(cfg, tmp_path / "rules.jsonl")
    assert [(r["proposer"], r["verifier"]) for r in rows] == [
        ("zoo_draft", "token"), ("zoo_draft", "typical"), ("short", "token"), ("short", "typical")]
    assert all(r["tokens_per_forward"] >= 1 and r["sampled_tokens_per_forward"] >= 1 and r["steps"] >= 1 for r in rows)
    assert [r["lossless"] for r in rows] == [True, False, True, False]
    kept = [json.loads(line) for line in (tmp_path / "rules.jsonl").read_text().splitlines()]
    assert kept == rows
    assert "typical (lossy)" in table(rows) and "1.000x" in table(rows)


def test_a_variant_setting_the_proposer_does_not_have_is_named():
    cfg = load("experiment.proposers=[]", "experiment.prompts=1", "~experiment.variants", "+experiment.variants={bad: {config: zoo_draft, set: {gama: 2}}}")
    with pytest.raises(ValueError, match=r"experiment.variants.bad: \['gama'\]"):
        measure(cfg)
