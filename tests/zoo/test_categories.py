"""experiments.categories end to end on the embedded zoo (one prompt per category, a few tokens)."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.categories import run
from framework.zoo.prompts import CATEGORIES

CONF = Path(__file__).resolve().parents[2] / "conf"


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="categories", overrides=list(overrides))


def test_every_category_reports_acceptance_and_speed(tmp_path):
    rows = run(load("experiment.per_category=1", "experiment.max_new_tokens=6", "sampling=greedy", f"output_dir={tmp_path}"))
    assert [r["category"] for r in rows] == list(CATEGORIES)
    for r in rows:
        assert r["prompts"] == 1 and r["tokens_per_forward"] == pytest.approx(1 + r["mean_accepted"])
        assert 1.0 <= r["tokens_per_forward"] <= 5.0 and r["speedup"] > 0  # a chain of 4 emits at most 5 a forward
        assert r["step_cost"] > 0
        assert sum(r[k] for k in ("draft_frac", "target_frac", "verify_frac", "other_frac")) == pytest.approx(1.0)
    assert json.loads((tmp_path / "categories.json").read_text()) == rows


def test_unknown_category_and_tokenizer_free_target_are_named(tmp_path):
    with pytest.raises(ValueError, match="unknown categories"):
        run(load("experiment.categories=[poetry]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="needs a tokenizer"):
        run(load("models=tiny", "proposer=draft", f"output_dir={tmp_path}"))
