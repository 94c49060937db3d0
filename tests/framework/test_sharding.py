"""Targets placed by layers (device_map) in one process, and the settings and checks of sharded targets
(framework/lm/sharding.py). The two-process tensor-parallel runs are in test_sharded_processes.py."""

import importlib
import os
from pathlib import Path

import pytest
import torch
from hydra import compose
from hydra.utils import instantiate
from omegaconf import OmegaConf

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.core.tree_mask import TreeMask
from framework.lm import sharding
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from measurement.common import hydra_conf, write_json
from proposers import DraftModelProposer

TINY = dict(seed=0, init_std=0.3, num_layers=3)
# Layer 1 offloaded to disk: accelerate's hooks load its weights for each forward (its parameters sit on "meta").
SPLIT = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
         "model.layers.2": "cpu", "model.norm": "cpu", "lm_head": "cpu"}
PROMPT = torch.tensor([[1, 2, 3, 4, 5], [9, 8, 7, 6, 5]])


def decode(model, sampling, proposer=None):
    return generate(HFTarget(model), proposer, PROMPT, 20, sampling, seed=3)


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0), SamplingConfig()], ids=["greedy", "T1"])
def test_a_target_split_by_layers_decodes_as_the_whole_one(sampling):
    """The same seed gives the same tokens: the placed target's laws are the whole one's, its KV commit keeps the
    same rows (a draft model's tree, batch 2)."""
    whole = tiny_random_model(**TINY)
    placed = tiny_random_model(**TINY, device_map=SPLIT)
    assert placed.model.layers[1].self_attn.q_proj.weight.device.type == "meta"  # really offloaded
    assert sharding.placement_of(placed) == "device_map cpu,disk"
    def draft():  # the target's own weights as the draft: most nodes are accepted, so commits keep deep paths
        return DraftModelProposer(tiny_random_model(**TINY), branching=2, depth=3)

    spec = decode(placed, sampling, draft())
    assert spec.stats.accepted_total > 20
    assert torch.equal(spec.tokens, decode(whole, sampling, draft()).tokens)
    assert torch.equal(decode(placed, sampling).tokens, decode(whole, sampling).tokens)


def test_a_device_map_from_the_command_line_places_the_target(tmp_path):
    """`target.device_map={...}` reaches load_causal_lm as a DictConfig."""
    with hydra_conf():
        cfg = compose(config_name="config", overrides=["models=tiny", "target.num_layers=3",
                                                       "target.device_map={"
                                                       + ",".join(f"{k}:{v}" for k, v in SPLIT.items()) + "}"])
    assert sharding.placement_of(instantiate(cfg.target)) == "device_map cpu,disk"


def test_hidden_states_of_a_placed_target_come_back_on_its_input_device():
    target = HFTarget(tiny_random_model(**TINY, device_map=SPLIT), hidden_layers=(0, 2))
    out = target.prefill(PROMPT)
    assert target.device == torch.device("cpu") and out.hidden.device == target.device
    assert out.hidden.shape == (2, 5, 2, 32)


def test_placement_settings_are_named(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        tiny_random_model(**TINY, device_map="auto", tp_plan="auto")
    with pytest.raises(ValueError, match="tp_plan='rows'"):
        sharding.check_placement("cpu", None, "rows")
    with pytest.raises(ValueError, match="place the target themselves"):
        load_causal_lm("target", device="cuda", device_map="auto")


def test_a_process_count_that_does_not_divide_the_heads_is_named():
    config = tiny_random_model(num_heads=4, num_kv_heads=2).config
    sharding.check_tensor_parallel(config, 2)
    with pytest.raises(ValueError,
                       match=r"3 does not divide the target's 4 attention heads and 2 key-value heads.*\[1, 2\]"):
        sharding.check_tensor_parallel(config, 3)
    with pytest.raises(ValueError, match="4 does not divide"):  # 4 query heads, but only 2 key-value heads to split
        sharding.check_tensor_parallel(config, 4)


def test_fingerprints_tell_values_and_shapes_apart():
    a = torch.tensor([[3, 1, 2]])
    same = sharding.fingerprint([a, torch.tensor([0, -1])])
    assert torch.equal(same, sharding.fingerprint([a.clone(), torch.tensor([0, -1])]))
    for other in ([torch.tensor([[1, 3, 2]]), torch.tensor([0, -1])], [a, torch.tensor([0, -1, 0])],
                  [a, torch.tensor([0, 1])]):
        assert not torch.equal(same, sharding.fingerprint(other))


def test_one_process_has_no_agreement_to_keep():
    target = HFTarget(tiny_random_model(**TINY))
    assert target.agreement is None and sharding.shared_clock("policy", target) == "policy"
    assert "/one device/" in target.cost_key()


def test_only_rank_zero_writes(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "1")
    folder = sharding.run_folder(str(tmp_path / "run"))
    assert not (tmp_path / "run").exists() and Path(folder).is_dir() and "rank1" in folder
    assert not write_json(str(tmp_path), "result.json", {}).exists()
    monkeypatch.setenv("RANK", "0")
    assert write_json(str(tmp_path), "result.json", {}).is_file()


def test_a_tree_mask_moves_once_per_device():
    mask = TreeMask(torch.ones(2, 3, dtype=torch.bool), torch.eye(2, dtype=torch.bool))
    assert mask.to("cpu") is mask
    meta = mask.to("meta")
    assert meta.tree.device.type == "meta" and mask.to(torch.device("meta")) is meta


def test_a_draft_in_another_dtype_is_named():
    target = HFTarget(tiny_random_model(**TINY))
    draft = tiny_random_model(seed=1, num_layers=1, dtype="float64")
    with pytest.raises(ValueError, match="draft in torch.float64 but target in torch.float32"):
        generate(target, DraftModelProposer(draft, depth=2), PROMPT, 4, SamplingConfig())


def test_torchrun_environment_is_read(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert sharding.launched_processes() == 4 and sharding.process_rank() == 3 and not sharding.writes_results()
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert sharding.launched_processes() == 1 and sharding.writes_results()
    assert os.environ.get("RANK") is None


def test_a_target_layer_a_head_calls_returns_its_output_to_the_callers_device():
    layer = torch.nn.Linear(4, 3)
    on_meta = sharding.ReturnsTo(layer, torch.device("meta"))
    assert on_meta.weight is layer.weight and on_meta(torch.ones(2, 4)).device.type == "meta"
    assert torch.equal(sharding.ReturnsTo(layer, torch.device("cpu"))(torch.ones(2, 4)), layer(torch.ones(2, 4)))


@pytest.mark.parametrize("entry", ["compare", "check", "first_token", "structured"])
def test_entry_points_that_write_from_every_process_refuse_torchrun(monkeypatch, entry):
    monkeypatch.setenv("WORLD_SIZE", "2")
    module = importlib.import_module(f"experiments.{entry}")
    with pytest.raises(SystemExit, match=f"experiments.{entry} runs in one process, and torchrun started 2"):
        module.run(OmegaConf.create({}))
