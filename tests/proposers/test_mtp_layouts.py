"""The MTP fixture writers (tests/proposers/mtp_layouts.py): each folder still loads as its tiny target, the MTP
tensors set aside as unexpected keys and the logits those of the target before the edit; the DeepSeek/GLM folders
also run under transformers' own MTP decoding, greedy as plain greedy."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors import safe_open

from framework.lm.models import tiny_random_model
from tests.proposers.mtp_layouts import (
    DEFAULT_INIT_STD,
    deepseek_folder,
    mimo_folder,
    qwen3_next_style_folder,
    transformers_mtp_model,
)

PROMPT = torch.tensor([[40, 3, 9, 1, 0, 22, 5, 5]])
H, V = 32, 64  # tiny_random_model's default sizes

WRITERS = {
    "deepseek_v3": (lambda folder: deepseek_folder(folder, "deepseek_v3", num_modules=2, seed=3), "deepseek_v3"),
    "glm4_moe": (lambda folder: deepseek_folder(folder, "glm4_moe", num_modules=1, seed=3), "glm4_moe"),
    "qwen3_next": (lambda folder: qwen3_next_style_folder(folder, seed=3), "qwen3"),
    "mimo": (lambda folder: mimo_folder(folder, seed=3, num_modules=2), "qwen2"),
}
# The parts each layout adds beside a decoder block's keys, with their shapes.
OWN_PARTS = {
    "deepseek_v3": {"enorm.weight": (H,), "hnorm.weight": (H,), "eh_proj.weight": (H, 2 * H),
                    "shared_head.norm.weight": (H,), "shared_head.head.weight": (V, H), "embed_tokens.weight": (V, H)},
    "glm4_moe": {"enorm.weight": (H,), "hnorm.weight": (H,), "eh_proj.weight": (H, 2 * H),
                 "shared_head.norm.weight": (H,), "shared_head.head.weight": (V, H)},
    "qwen3_next": {"fc.weight": (H, 2 * H), "pre_fc_norm_embedding.weight": (H,), "pre_fc_norm_hidden.weight": (H,),
                   "norm.weight": (H,), "layers.0.self_attn.q_norm.weight": (H // 4,)},
    "mimo": {"token_layernorm.weight": (H,), "hidden_layernorm.weight": (H,), "input_proj.weight": (H, 2 * H),
             "final_layernorm.weight": (H,), "self_attn.q_proj.bias": (H,)},
}


@pytest.mark.parametrize("layout", list(WRITERS))
def test_the_folder_loads_as_its_target_with_the_mtp_tensors_aside(tmp_path, layout):
    write, arch = WRITERS[layout]
    folder, info = write(tmp_path / layout)
    with safe_open(folder / "model.safetensors", "pt") as f:
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (a safetensors file, not a dict)
    for prefix in info["prefixes"]:
        for part, shape in OWN_PARTS[layout].items():
            assert shapes[prefix + part] == shape, (prefix, part)
        assert any(k.startswith(prefix) and "mlp." in k for k in shapes), prefix  # a whole block, its MLP too
    assert set(info["keys"]) == {k for k in shapes if k.startswith(tuple(info["prefixes"]))}
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == info["N"] == 2 and config | info["config"] == config

    model, loading = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    # unexpected: the MTP tensors only (named after transformers' conversions: routed experts fused)
    assert loading["unexpected_keys"] and not loading["missing_keys"]
    assert all(k.startswith(tuple(info["prefixes"])) for k in loading["unexpected_keys"]), loading["unexpected_keys"]
    before = tiny_random_model(arch, seed=3, init_std=DEFAULT_INIT_STD)  # the target as written, before the edit
    with torch.no_grad():
        assert torch.equal(model.eval()(PROMPT).logits, before(PROMPT).logits)


@pytest.mark.parametrize("arch, num_modules", [("deepseek_v3", 1), ("deepseek_v3", 3), ("glm4_moe", 2)])
def test_transformers_own_mtp_decoding_is_plain_greedy(tmp_path, arch, num_modules):
    """generate(..., use_mtp=True) finds every module (a draft per module and step) and keeps greedy's tokens."""
    folder, _ = deepseek_folder(tmp_path / arch, arch, num_modules=num_modules)
    model = transformers_mtp_model(folder)
    with torch.no_grad():
        plain, mtp = (model.generate(PROMPT, max_new_tokens=10, do_sample=False, use_mtp=use)
                      for use in (False, True))
    assert torch.equal(plain, mtp)
