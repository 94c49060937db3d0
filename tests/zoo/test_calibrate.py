"""Temperature calibration: the fold is exact, the fit recovers a planted temperature, the
checkpoint keeps its dtype."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from framework.data.token_data import TokenData
from framework.zoo.calibrate import calibrate, calibrate_checkpoint, fold_temperature, loss_by_temperature
from framework.zoo.models import llama_config


def tiny(seed: int, dtype=torch.float32):
    torch.manual_seed(seed)
    config = llama_config(97, num_layers=1, hidden_size=32, num_heads=2, num_kv_heads=1, intermediate_size=64)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


IDS = torch.randint(97, (4 * 32,), generator=torch.Generator().manual_seed(0))
STREAM = TokenData(IDS, torch.ones_like(IDS, dtype=torch.bool), "test")


def test_fold_divides_the_logits():
    model, ids = tiny(0), IDS[None, :32]
    with torch.no_grad():
        before = model(ids).logits
        fold_temperature(model, 1.25)
        torch.testing.assert_close(model(ids).logits, before / 1.25)
    with pytest.raises(ValueError, match="positive"):
        fold_temperature(model, 0.0)


def test_fit_recovers_a_planted_temperature():
    teacher, student = tiny(0), tiny(0)
    fold_temperature(student, 1 / 1.3)  # the student's logits are the teacher's x 1.3: too sharp by T = 1.3
    fit = calibrate(student, STREAM, block_size=32, teacher=teacher)
    assert fit["temperature"] == 1.3 and fit["loss"] < 1e-6 < fit["loss_at_1"]
    losses = loss_by_temperature(student, STREAM, block_size=32, teacher=teacher)  # after the fold: T = 1 is best
    assert min(losses, key=losses.get) == 1.0


def test_fit_on_the_grid_edge_is_refused():
    teacher, student = tiny(0), tiny(0)
    fold_temperature(student, 1 / 3.0)
    with pytest.raises(ValueError, match="edge of the grid"):
        calibrate(student, STREAM, block_size=32, teacher=teacher)


def test_checkpoint_is_rewritten_in_its_dtype(tmp_path):
    tiny(0, torch.bfloat16).save_pretrained(tmp_path / "teacher")
    student = tiny(0, torch.bfloat16)
    fold_temperature(student, 1 / 1.3)
    student.save_pretrained(tmp_path / "student")
    fit = calibrate_checkpoint(tmp_path / "student", STREAM, 32, teacher_folder=tmp_path / "teacher")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "student")
    assert reloaded.dtype == torch.bfloat16 and fit["temperature"] == 1.3
    assert json.loads((tmp_path / "student" / "calibration.json").read_text())["temperature"] == 1.3
