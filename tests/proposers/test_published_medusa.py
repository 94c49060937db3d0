"""Published Medusa folders (FasterDecoding's Medusa-1, TGI's "version 2", Medusa-2 full models) load
through proposers.load_head, compute the published heads (a reference written here), decode
losslessly, and name what is wrong. Built offline: no hub is reached."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from harness.real import greedy_identity
from proposers import MedusaProposer, load_head

TARGET = tiny_random_model("llama", seed=3, dtype="float32", init_std=0.3)  # H 32, V 64
H, V = 32, 64
# a medusa_choices.py-style tree: a list of rank tuples
MEDUSA_CHOICES = [(0,), (0, 0), (1,), (0, 1), (2,), (0, 0, 0), (1, 0), (0, 2), (3,), (0, 0, 1)]


def published_state(heads: int, layers: int, generator, version2=False, dtype=torch.float16) -> dict:
    """{k}.{j}.linear.* (one block per head, repeated `layers` times: one instance in the published code)
    and {k}.{L}.weight; version 2 keeps the blocks only."""
    state = {}
    for k in range(heads):
        w, b = torch.randn(H, H, generator=generator) / H**0.5, torch.randn(H, generator=generator) * 0.1
        for j in range(layers):
            state[f"{k}.{j}.linear.weight"], state[f"{k}.{j}.linear.bias"] = w.to(dtype), b.to(dtype)
        if not version2:
            state[f"{k}.{layers}.weight"] = (torch.randn(V, H, generator=generator) / H**0.5).to(dtype)
    return state


def medusa_folder(folder, heads=5, layers=1, stated=2, file="medusa_lm_head.pt", version2=False, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    state = published_state(heads, layers, torch.Generator().manual_seed(seed), version2)
    config = {"medusa_num_heads": stated, "medusa_num_layers": layers, "base_model_name_or_path": "x"}
    (folder / "config.json").write_text(json.dumps({**config, **({"version": "2"} if version2 else {})}))
    torch.save(state, folder / file) if file.endswith(".pt") else save_file(state, str(folder / file))
    return folder, state


def reference(state: dict, hidden: torch.Tensor, k: int, layers: int, lm_head=None) -> torch.Tensor:
    """Head k: the same ResBlock x + SiLU(W x + b) applied `layers` times, then its own W_out (or the target's
    lm_head)."""
    x = hidden.double()
    w, b = state[f"{k}.0.linear.weight"].double(), state[f"{k}.0.linear.bias"].double()
    for _ in range(layers):
        x = x + torch.nn.functional.silu(x @ w.T + b)
    return x @ (state[f"{k}.{layers}.weight"].double() if lm_head is None else lm_head.double()).T


@pytest.mark.parametrize("file", ["medusa_lm_head.pt", "medusa_lm_head.safetensors"])
def test_medusa1_heads_count_from_the_weights(tmp_path, file):
    """M1: the config says 2 heads, the file holds 5: five heads, the disagreement reported; logits as published."""
    folder, state = medusa_folder(tmp_path, file=file)
    with pytest.warns(UserWarning, match="config says 2 Medusa heads, the weights hold 5"):
        heads = load_head(folder)
    assert heads.config.num_heads == 5
    hidden = torch.randn(3, H)
    logits = heads(hidden)  # [3, 5, V]
    for k in range(5):
        assert (logits[:, k].double() - reference(state, hidden, k, 1)).abs().max() <= 1e-5


def test_medusa1_repeated_blocks_are_one_block_applied_twice(tmp_path):
    """M2: medusa_num_layers 2 stores one shared block twice; the head applies it twice."""
    folder, state = medusa_folder(tmp_path, heads=2, layers=2, stated=2)
    heads = load_head(folder)
    hidden = torch.randn(4, H)
    for k in range(2):
        assert (heads(hidden)[:, k].double() - reference(state, hidden, k, 2)).abs().max() <= 1e-5


def test_version2_heads_read_through_the_targets_lm_head(tmp_path):
    """M3: "version": "2" keeps the blocks only; logits are lm_head_target(R_k(x))."""
    folder, state = medusa_folder(tmp_path, heads=3, stated=3, version2=True, file="medusa_lm_head.safetensors")
    heads = load_head(folder)
    assert not heads.config.own_lm_heads
    lm_head = TARGET.get_output_embeddings()
    hidden = torch.randn(2, H)
    for k in range(3):
        want = reference(state, hidden, k, 1, lm_head.weight.detach())
        assert (heads(hidden, lm_head)[:, k].double() - want).abs().max() <= 1e-5
    report = greedy_identity(TARGET, lambda: MedusaProposer(heads, MEDUSA_CHOICES[:6]), torch.tensor([[4, 9, 2]]), 16)
    assert report.equal


def medusa2_folder(folder, target, heads: int = 3, seed: int = 1):
    """Medusa-2's layout: the target saved with medusa_head.* tensors beside its own, and the heads in its config."""
    from safetensors.torch import load_file

    target.save_pretrained(folder)
    model_state = load_file(str(folder / "model.safetensors"))
    heads_state = published_state(heads, 1, torch.Generator().manual_seed(seed), dtype=torch.float32)
    save_file({**model_state, **{f"medusa_head.{k}": v for k, v in heads_state.items()}},
              str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "medusa_num_heads": heads, "medusa_num_layers": 1}))
    return folder, heads_state


def test_medusa2_full_folder_is_the_target_and_the_heads(tmp_path):
    """M4: a save_pretrained llama with medusa_head.* keys loads as the plain model, and gives the heads."""
    folder, heads_state = medusa2_folder(tmp_path / "medusa2", TARGET)
    model = load_causal_lm(folder)
    tokens = torch.tensor([[4, 9, 2, 7]])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens).logits, TARGET(tokens).logits, rtol=0, atol=1e-5)  # SDPA vs eager
    heads = load_head(folder)
    hidden = torch.randn(2, H)
    for k in range(3):
        assert (heads(hidden)[:, k].double() - reference(heads_state, hidden, k, 1)).abs().max() <= 1e-5
    report = greedy_identity(model, lambda: MedusaProposer(heads, MEDUSA_CHOICES[:8]), tokens, 16)
    assert report.equal


def test_loaded_heads_decode_greedy_with_medusa_choices(tmp_path):
    """M5: Medusa-1 heads with a medusa_choices.py-style tree: greedy equals plain greedy, B = 2."""
    folder, _ = medusa_folder(tmp_path, heads=4, stated=4)
    heads = load_head(folder)
    greedy = SamplingConfig(temperature=0.0)
    prompts = torch.tensor([[4, 9, 2], [7, 1, 1]])
    spec = generate(HFTarget(TARGET), MedusaProposer(heads, MEDUSA_CHOICES), prompts, 20, greedy).tokens
    assert torch.equal(spec, generate(HFTarget(TARGET), None, prompts, 20, greedy).tokens)


def test_bad_folders_are_named(tmp_path):
    """M6: another H or V names both sizes; a folder with no head file names the files looked for."""
    folder, _ = medusa_folder(tmp_path / "h", heads=2, stated=2)
    other = tiny_random_model("llama", seed=3, hidden_size=16, vocab_size=80)
    with pytest.raises(ValueError,
                       match="hidden size 32 and vocabulary 64, but this target has hidden size 16 and vocabulary 80"):
        generate(HFTarget(other), MedusaProposer(load_head(folder)), torch.tensor([[1, 2]]), 4)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text(json.dumps({"medusa_num_heads": 2}))
    with pytest.raises(FileNotFoundError, match="medusa_lm_head.safetensors, medusa_lm_head.pt|model.safetensors"):
        load_head(empty)
    with pytest.raises(FileNotFoundError, match="looked for"):
        load_head(tmp_path / "nothing_here")
    with pytest.raises(ValueError, match="'float33' is not a torch dtype"):
        load_head(folder, "float33")


@pytest.mark.parametrize("own", [True, False])
def test_heads_written_in_the_published_layout_read_back(tmp_path, own):
    folder, _ = medusa_folder(tmp_path / "src", heads=3, stated=3, version2=not own)
    heads = load_head(folder)
    heads.save(tmp_path / "out", dtype=torch.float32, format="medusa")
    again = load_head(tmp_path / "out")
    hidden = torch.randn(2, H)
    lm_head = TARGET.get_output_embeddings()
    assert torch.equal(again(hidden, lm_head), heads(hidden, lm_head))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json", "medusa_lm_head.safetensors"]


def test_hydra_runs_published_heads_against_a_local_target(tmp_path):
    """proposer=medusa models.medusa.heads.path=PATH and proposer=eagle3 models.eagle3.head.path=PATH against
    target.path=FOLDER."""
    from hydra import compose, initialize_config_dir
    from published_fixtures import eagle3_folder

    from experiments.run import run

    target = tiny_random_model("llama", seed=3, num_layers=8, init_std=0.3)
    target.save_pretrained(tmp_path / "target")
    medusa, _ = medusa_folder(tmp_path / "medusa", heads=3, stated=3)
    eagle3 = eagle3_folder(tmp_path / "eagle3")
    runs = {"medusa": [f"models.medusa.heads.path={medusa}", "proposer.choices=[[0],[0,0],[1]]"],
            "eagle3": [f"models.eagle3.head.path={eagle3}", "proposer.top_k=3", "proposer.depth=3",
                       "proposer.budget=6"]}
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    for method, overrides in runs.items():
        with initialize_config_dir(config_dir=conf, version_base="1.3"):
            cfg = compose("config", [f"target.path={tmp_path / 'target'}", f"proposer={method}", *overrides,
                                     "prompt=[4,9,2]", "sampling=greedy", "max_new_tokens=12",
                                     f"output_dir={tmp_path / method}", "experiment.warmup=0", "experiment.repeats=1"])
        result = run(cfg)
        assert result["tokens"] == result["plain_tokens"], method
