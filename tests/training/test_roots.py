"""A training root belongs to one run and one target: a second training in it is refused while the first holds it,
a root resumed against another target of the same vocabulary is refused by name, and a run of no steps (which would
export the untrained initial weights) is refused before anything loads (issue 58, cases 3 and 5)."""

from __future__ import annotations

import pytest
import torch

from framework.core import files
from framework.data.token_data import TokenData
from framework.lm.models import tiny_random_model
from proposers.draft_training import DraftTrainConfig, train_drafts
from proposers.eagle.training import EagleTrainConfig
from proposers.medusa.training import MedusaTrainConfig


def data():
    stream = torch.arange(512, dtype=torch.int32) % 60
    part = TokenData(stream, torch.ones_like(stream, dtype=torch.bool), "test")
    return {"train": part, "valid": part, "heldout": part}


CFG = dict(steps=2, batch_size=2, block_size=16, warmup=1, eval_every=100, eval_tokens=64, save_every=1, device="cpu")


def test_a_root_resumed_against_another_target_is_refused(tmp_path):
    draft = tiny_random_model("llama", seed=1, num_layers=1)
    assert train_drafts(tiny_random_model("llama", seed=0), draft, data(), tmp_path,
                        DraftTrainConfig(**CFG)) is not None
    other = tiny_random_model("llama", seed=5)  # the same vocabulary and shapes, other weights
    with pytest.raises(ValueError, match="trained against another target"):
        train_drafts(other, draft, data(), tmp_path, DraftTrainConfig(**{**CFG, "steps": 3}))
    resumed = train_drafts(tiny_random_model("llama", seed=0), draft, data(), tmp_path,
                           DraftTrainConfig(**{**CFG, "steps": 3}))
    assert resumed is not None  # the same target resumes
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=False)["step"] == 3


def test_a_root_another_training_holds_is_refused(tmp_path):
    with files.exclusive(tmp_path, "training"):  # as a running training holds it
        with pytest.raises(files.FolderBusy, match="in use by another"):
            train_drafts(tiny_random_model("llama", seed=0), tiny_random_model("llama", seed=1, num_layers=1), data(),
                         tmp_path, DraftTrainConfig(**CFG))
    assert not (tmp_path / "checkpoint.pt").exists()


@pytest.mark.parametrize("config", [DraftTrainConfig, EagleTrainConfig, MedusaTrainConfig])
@pytest.mark.parametrize("setting, value", [("steps", 0), ("steps", -5), ("batch_size", 0), ("lr", 0.0),
                                            ("save_every", 0), ("steps", 2.5)])
def test_numbers_of_a_training_are_checked_before_anything_loads(config, setting, value):
    with pytest.raises(ValueError, match=f"train.{setting} must be"):
        config(**{setting: value})


def test_the_command_lines_train_settings_win_over_a_models_own_and_say_so(capsys):
    """`training.train.steps=20` reaches every model, the zoo's drafts with their own steps too (issue 58, case 5)."""
    from omegaconf import OmegaConf

    from experiments.train import own_settings

    spec = OmegaConf.create({"train": {"steps": 2000, "batch_size": 16}})
    assert own_settings("draft", spec, {"steps"}) == {"batch_size": 16}
    assert ("draft: training.train.steps from the command line replaces its own train.steps=2000"
            in capsys.readouterr().out)
    assert own_settings("draft", spec, set()) == {"steps": 2000, "batch_size": 16}


def test_the_old_experiment_spelling_of_a_training_names_the_new_one():
    """Training settings moved from conf/experiment to conf/training: `experiment=zoo_mtp` says `training=zoo_mtp`."""
    from experiments.train import refuse_old_spelling

    with pytest.raises(SystemExit, match="`experiment=zoo_mtp` is now `training=zoo_mtp`"):
        refuse_old_spelling(["experiment=zoo_mtp", "loss=lk"])
    with pytest.raises(SystemExit, match="is now `training.train.steps=4`"):
        refuse_old_spelling(["training=zoo", "experiment.train.steps=4"])
    refuse_old_spelling(["training=zoo_mtp", "training.train.steps=4", "loss=lk"])
