"""experiments.first_token end to end on a tiny target: the sampled first token follows the target's
law (and a planted bias is caught), the draft's first-candidate law is recorded, the plot is written."""

import json
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from experiments.first_token import run
from experiments.first_tokens import summarise

CONF = Path(__file__).resolve().parents[1] / "conf"


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="first_token", overrides=list(overrides))


def test_first_token_follows_the_target_law(tmp_path):
    for proposer in ("eagle3", "draft"):
        stats = run(load("models=tiny", f"proposer={proposer}", "experiment.samples=4096",
                         f"output_dir={tmp_path / proposer}"))
        assert stats["samples"] == 4096 and stats["outside_support"] == 0 and stats["g_test_passes"], stats
        assert (tmp_path / proposer / "first_token.png").stat().st_size > 0
        assert json.loads((tmp_path / proposer / "first_token.json").read_text())["samples"] == 4096


def test_a_biased_sampler_is_caught():
    target = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    fair = summarise(torch.tensor([5012.0, 2990.0, 1998.0]), target)
    biased = summarise(torch.tensor([5600.0, 2500.0, 1900.0]), target)  # TV 0.06 at N = 10,000
    assert fair["g_test_passes"] and not biased["g_test_passes"]
    assert biased["deviation_std"] > 3 * biased["multinomial_std"] > 3 * fair["deviation_std"] / 2
