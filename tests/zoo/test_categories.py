"""experiment=categories, compare's Spec-Bench-style preset, end to end on the embedded zoo (one prompt per
category, a few tokens): the run's own proposer per category against plain decoding, with the step cost."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments import compare
from framework.zoo.prompts import CATEGORIES

CONF = Path(__file__).resolve().parents[2] / "conf"


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="compare", overrides=["experiment=categories", *overrides])


def test_every_category_reports_acceptance_speed_and_step_cost(tmp_path):
    result = compare.run(load("experiment.per_category=1", "experiment.max_new_tokens=6",
                              "experiment.samplings=[greedy]", f"output_dir={tmp_path}"))
    rows = result["rows"]
    assert [(r["method"], r["category"]) for r in rows] == [("proposer", c) for c in CATEGORIES]
    for r in rows:
        assert r["prompts"] == 1 and r["greedy_identical"] == "1/1" and r["lossless_check"] is None
        assert 1.0 <= r["tokens_per_forward"] <= 5.0 and r["speedup"] > 0  # a chain of 4 emits at most 5 a forward
        assert r["step_cost"] > 0 and r["mean_accepted"] >= 0
        assert sum(r[k] for k in ("draft_frac", "target_frac", "verify_frac", "other_frac")) == pytest.approx(1.0)
    written = json.loads((tmp_path / "result.json").read_text())  # what the Optuna sweeper and sweep_merge read
    assert written["speedup"] == pytest.approx(result["summary"][0]["speedup"])


def test_unknown_category_and_tokenizer_free_target_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown categories"):
        compare.run(load("experiment.categories=[poetry]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="needs a tokenizer"):
        compare.run(load("models=tiny", f"output_dir={tmp_path}"))
