"""vLLM's speculators layout read (a fixture built here from its published config and key names) and
written; our heads written in SpecForge's and SafeAILab's layouts read back to the same outputs."""

import json

import pytest
import torch
from published_fixtures import eagle3_folder, eagle3_reference, load_state
from safetensors.torch import load_file, save_file

from framework.lm.models import tiny_random_model
from framework.zoo.checkpoints import EMBEDDED, load_causal_lm
from harness.real import greedy_identity
from proposers import EagleProposer, load_head
from proposers.eagle.head import random_head

TARGET = tiny_random_model("llama", seed=3, num_layers=8, dtype="float64", init_std=0.3)
TOKENS = torch.tensor([[5, 9, 1, 33, 7, 2]])
TOL = 1e-5  # transformers' RoPE is float32


def speculators_folder(folder, ids=(2, 4, 5), embed=True, **config_changes):
    """A speculators 0.9 EAGLE-3 folder: SpecForge's weights renamed midlayer.* -> layers.0.*, its config."""
    source = eagle3_folder(folder / "src")
    state = {("layers.0." + k[9:] if k.startswith("midlayer.") else k): v
             for k, v in load_file(str(source / "model.safetensors")).items()}
    if embed:
        state["embed_tokens.weight"] = TARGET.get_input_embeddings().weight.detach().float().clone()
    layer = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 8, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "vocab_size": 64,
             "max_position_embeddings": 256, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    config = {"architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3", "speculators_version": "0.9.0",
              "speculators_config": {"algorithm": "eagle3", "default_proposal_method": "greedy",
                                     "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                           "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                     "verifier": {"name_or_path": None, "architectures": ["LlamaForCausalLM"]}},
              "transformer_layer_config": layer, "draft_vocab_size": 16, "target_hidden_size": None,
              "eagle_aux_hidden_state_layer_ids": list(ids), "norm_before_residual": False, **config_changes}
    out = folder / "speculators"
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config))
    save_file(state, str(out / "model.safetensors"))
    return out, load_state(source)


def hidden(model=TARGET, tokens=TOKENS):
    with torch.no_grad():
        return model(tokens, output_hidden_states=True).hidden_states


def test_a_speculators_eagle3_folder_matches_the_published_forward(tmp_path):
    """vLLM's ids are hidden_states indices ([2, 4, 5] reads hs 2, 4, 5); the embedding copy is checked, not used."""
    folder, state = speculators_folder(tmp_path)
    head = load_head(folder, "float64")
    proposer = EagleProposer(head, [(0,), (1,)])
    from framework.lm.target import HFTarget

    proposer.prefill(TOKENS, HFTarget(TARGET))
    assert proposer.hidden_layers == (2, 4, 5) and head.stored_embedding is not None
    hs = hidden()
    e = TARGET.get_input_embeddings()(TOKENS[:, 1:])
    g = torch.cat([hs[2], hs[4], hs[5]], -1)[:, :-1] @ state["fc.weight"].T
    with torch.no_grad():
        got = head(e, head.fused(torch.stack([hs[2], hs[4], hs[5]], 2)[:, :-1]), torch.arange(5)[None])
    want_h, want_logits = eagle3_reference(state, e, g)
    assert (got - want_h).abs().max() <= TOL and (head.draft_logits(got) - want_logits).abs().max() <= TOL


def test_speculators_options_we_do_not_implement_are_refused(tmp_path):
    for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        folder, _ = speculators_folder(tmp_path / flag, **{flag: True})
        with pytest.raises(ValueError, match=flag):
            load_head(folder)


def test_the_draft_layers_rope_is_read_with_its_scaling(tmp_path):
    """A draft trained by speculators carries the verifier's llama3-scaled RoPE in transformer_layer_config."""
    llama3 = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "high_freq_factor": 4.0,
              "low_freq_factor": 1.0, "original_max_position_embeddings": 64}
    folder, _ = speculators_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["transformer_layer_config"]["rope_parameters"] = llama3
    (folder / "config.json").write_text(json.dumps(config))
    head = load_head(folder)
    assert head.config.rope_parameters == llama3
    plain = load_head(speculators_folder(tmp_path / "plain")[0])
    x, positions = torch.zeros(1, 4, 32), torch.tensor([[0, 100, 200, 250]])
    assert not torch.allclose(head.rotary(x, positions)[0], plain.rotary(x, positions)[0])


@pytest.mark.parametrize("fmt", ["speculators", "specforge", "speculum"])
def test_a_head_written_in_a_layout_reads_back_the_same(tmp_path, fmt):
    """Export then load: the same config where the layout states it, identical outputs (T4 for SpecForge)."""
    head = random_head(32, 64, 8, (2, 4, 5), "eagle3", 48, num_heads=4, num_kv_heads=2, intermediate_size=48, seed=1,
                       dtype="float64")
    options = {"embedding": TARGET.get_input_embeddings().weight} if fmt == "speculators" else {}
    head.save(tmp_path, dtype=torch.float64, format=fmt, **options)
    again = load_head(tmp_path, "float64")
    assert type(again) is type(head) and again.config.target_layers == (2, 4, 5)
    assert torch.equal(again.d2t, head.d2t) and torch.equal(again.t2d, head.t2d)
    hs = hidden()
    feature = head.fused(torch.stack([hs[2], hs[4], hs[5]], 2)[:, :-1])
    e = TARGET.get_input_embeddings()(TOKENS[:, 1:])
    with torch.no_grad():
        assert torch.equal(again.logits(again(e, feature, torch.arange(5)[None])),
                           head.logits(head(e, feature, torch.arange(5)[None])))


def test_an_eagle1_head_written_in_safeailabs_layout_reads_back(tmp_path):
    head = random_head(32, 64, 8, None, "eagle", num_heads=4, num_kv_heads=2, intermediate_size=48, seed=2,
                       dtype="float64")
    head.save(tmp_path, dtype=torch.float64, format="eagle")
    again = load_head(tmp_path, "float64")
    assert sorted(load_file(str(tmp_path / "model.safetensors"))) == sorted(head.state_dict())
    x = torch.randn(1, 4, 32, dtype=torch.float64)
    with torch.no_grad():
        assert torch.equal(again(x, x, torch.arange(4)[None]), head(x, x, torch.arange(4)[None]))
    with pytest.raises(ValueError, match="SpecForge layout holds EAGLE-3"):
        head.save(tmp_path / "x", format="specforge")
    with pytest.raises(ValueError, match="unknown head format 'vllm'"):
        head.save(tmp_path / "y", format="vllm")


def test_the_zoo_eagle3_committed_in_speculators_layout_is_the_zoo_head():
    """experiments/zoo/eagle3/speculators (written by training=zoo_eagle3) reads back as the zoo's head."""
    ours, published = load_head("eagle3"), load_head(EMBEDDED / "eagle3" / "speculators")
    assert json.loads((EMBEDDED / "eagle3" / "speculators" / "config.json").read_text())[
        "speculators_model_type"] == "eagle3"
    for name, value in ours.state_dict().items():
        assert torch.equal(published.state_dict()[name], value), name
    assert ours.config.target_layers is None and ours.config.layers_for(20) == (2, 10, 17)  # EAGLE-3's default
    assert published.config.target_layers == (2, 10, 17)  # written as vLLM's ids: hidden_states indices
    make = lambda: EagleProposer(published, None, top_k=4, depth=3, budget=8)  # noqa: E731
    assert greedy_identity(load_causal_lm("target"), make, torch.tensor([[14, 271, 2010, 30]]), 12).equal
