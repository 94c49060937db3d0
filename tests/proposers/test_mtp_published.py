"""MTP modules read from the published layouts (tests/proposers/mtp_layouts.py writes them on tiny targets):
DeepSeek-V3 (MLA, routed experts) and GLM-4.5 checked against transformers' own MtpModel (the same per-depth
logits from the same inputs) and its `generate(..., use_mtp=True)` (greedy identical to it and to plain decoding
for K = 1, 2, 3); MiMo's and Qwen3-Next's layouts read from the target's own folder, greedy identical; only the MTP
tensors are read."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.cache_utils import MtpCache
from transformers.modeling_layers import MtpModel

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from harness.real import greedy_identity
from proposers import MtpProposer
from proposers.mtp.layouts import read_mtp
from tests.proposers.mtp_layouts import deepseek_folder, mimo_folder, qwen3_next_style_folder, transformers_mtp_model

PROMPT = torch.tensor([[5, 17, 42, 9, 33, 3]])


def our_chain_logits(head, model, ids: torch.Tensor) -> torch.Tensor:
    """Our modules chained as transformers' MtpModel chains them: depth k reads the tokens shifted k + 1 and the
    previous depth's output, causal over the sequence -> the last position's logits per depth [K, V]."""
    with torch.no_grad():
        hidden = model(ids[:, :-1], output_hidden_states=True).hidden_states[-1]  # [1, T, H], after the final norm
        tokens, feature, out = ids[:, 1:], hidden, []
        positions = torch.arange(1, ids.shape[1])[None]
        for k, module in enumerate(head.layers):
            h = module(model.get_input_embeddings()(tokens), feature, head.rotary(feature, positions))
            logits = head.logits(h[:, -1], model.get_output_embeddings(), step=k)
            out.append(logits[0])
            tokens = torch.cat([tokens[:, 1:], logits.argmax(-1, keepdim=True)], dim=1)
            feature, positions = h, positions + 1
    return torch.stack(out)


@pytest.mark.parametrize("arch", ["deepseek_v3", "glm4_moe"])
def test_the_modules_compute_what_transformers_mtp_computes(arch, tmp_path):
    folder, _ = deepseek_folder(tmp_path / arch, arch, num_modules=2, seed=0)
    model = transformers_mtp_model(folder)
    theirs = MtpModel.from_pretrained(model, device_map={"": "cpu"}).eval()
    head = read_mtp(folder)
    ids = torch.tensor([[5, 17, 42, 9, 33, 3, 21, 8]])
    with torch.no_grad():
        hidden = model(ids[:, :-1], output_hidden_states=True).hidden_states[-1]
        _, logits, _ = theirs(input_ids=ids[:, 1:], last_hidden_states=hidden, attention_mask=None,
                              position_ids=torch.arange(1, ids.shape[1])[None],
                              mtp_cache=MtpCache(config=model.config.get_mtp_config()))
    assert torch.allclose(our_chain_logits(head, model, ids), logits[0], atol=1e-4)


@pytest.mark.parametrize("arch", ["deepseek_v3", "glm4_moe"])
@pytest.mark.parametrize("K", [1, 2, 3])
def test_greedy_is_transformers_use_mtp_and_plain_decoding(arch, K, tmp_path):
    folder, _ = deepseek_folder(tmp_path / arch, arch, num_modules=K, seed=0)
    model = transformers_mtp_model(folder)
    with torch.no_grad():
        plain = model.generate(PROMPT, max_new_tokens=12, do_sample=False)[0, PROMPT.shape[1]:]
        theirs = model.generate(PROMPT, max_new_tokens=12, do_sample=False, use_mtp=True)[0, PROMPT.shape[1]:]
    ours = generate(HFTarget(model), MtpProposer(read_mtp(str(folder)), depth=K), PROMPT, 12,
                    SamplingConfig(temperature=0.0))
    assert torch.equal(theirs, plain)
    assert ours.tokens[0].tolist() == plain.tolist()


@pytest.mark.parametrize("write", [mimo_folder, qwen3_next_style_folder], ids=["mimo", "qwen3_next"])
def test_the_target_folders_own_modules_decode_greedy_identically(write, tmp_path):
    folder, written = write(tmp_path / "target", seed=0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    head = read_mtp(folder, dtype=torch.float64)
    assert head.config.num_modules == written["num_modules"]
    report = greedy_identity(model, lambda: MtpProposer(head, depth=3, top_k=2), PROMPT, 16)
    assert report.equal, report.first_difference


def test_only_the_mtp_tensors_are_read(tmp_path, monkeypatch):
    folder, written = deepseek_folder(tmp_path / "ds", "glm4_moe", num_modules=1)
    from proposers.mtp import layouts

    kept, real = [], layouts.read_weights
    monkeypatch.setattr(layouts, "read_weights",
                        lambda paths, keep: real(paths, lambda k: keep(k) and not kept.append(k)))
    read_mtp(folder)
    copies = ("shared_head.head.", "embed_tokens.")  # the target's head and embedding, copied into DeepSeek's layers
    assert sorted(kept) == [k for k in written["keys"] if not any(c in k for c in copies)]
    assert len(kept) < len(written["keys"])


@pytest.mark.slow  # a 61-layer target, so that transformers' own class finds its module where it looks (~30 s)
def test_transformers_use_mtp_is_a_compare_row(tmp_path):
    """`hf_mtp` beside `mtp` in experiments.compare on a DeepSeek-V3 folder whose module sits where transformers'
    DeepseekV3ForCausalLM reads it (layer 61): both greedy-identical to plain decoding; the same folder with 2 layers
    is refused by name (transformers would not load its module)."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from experiments import compare
    from measurement import compare_grid
    from tests.test_compare import CONF

    def load(folder, methods):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose(config_name="compare", overrides=[
                "models=tiny", "target=zoo_target", f"target.path={folder}", "~models.mtp.modules",
                f"+models.mtp.modules={{_target_:proposers.mtp.layouts.read_mtp,path:'{folder}'}}",
                "models.mtp.depth=1",
                "experiment.prompts=[[4,9,2,7],[1,5,5,3,8]]",
                "experiment.max_new_tokens=8", "experiment.samplings=[greedy]", f"experiment.methods={methods}",
                f"output_dir={tmp_path / 'run'}"])

    folder, _ = deepseek_folder(tmp_path / "ds", "deepseek_v3", num_modules=1, seed=0, num_layers=61)
    result = compare.run(load(folder, "[mtp,hf_mtp]"))
    rows = {r["method"]: r for r in result["rows"]}
    assert set(rows) == {"mtp", "hf_mtp"}
    for row in rows.values():
        assert row["greedy_identical"] == "2/2" and row["errors"] is None
    # the same module drafting one token from the same state: the same tokens per forward (a random module is
    # rarely right, so this pins agreement, not speed)
    assert rows["hf_mtp"]["tokens_per_forward"] == pytest.approx(rows["mtp"]["tokens_per_forward"])
    short, _ = deepseek_folder(tmp_path / "short", "deepseek_v3", num_modules=1, seed=0)
    grid = compare_grid.grid_of(load(short, "[hf_mtp]"))
    with pytest.raises(ValueError, match=r"reads its MTP modules from keys matching \(model\\\.layers\\\.61"):
        compare_grid.probe(grid, instantiate(load(short, "[hf_mtp]").target), torch.tensor([[1, 2]]), listed=True)
