"""MTP modules: greedy identity through the shared verifier (chains and trees, one module or several), the module for
each depth (the last reused past the count), our speculators MTP layout read back, and bad input named before any
drafting. The published layouts against transformers' own MTP: test_mtp_published.py."""

from __future__ import annotations

import pytest
import torch

from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.real import greedy_identity
from proposers import MtpProposer
from proposers.mtp.head import MtpHead, random_mtp, tiny_mtp
from proposers.mtp.layouts import read_mtp, write_speculators

PROMPT = torch.tensor([[4, 9, 2]])


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
@pytest.mark.parametrize("modules, top_k", [(1, 1), (2, 1), (1, 3)])
def test_greedy_identity(arch, modules, top_k):
    target = tiny_random_model(arch, seed=3, vocab_size=8, dtype="float64", init_std=0.3)  # drafts often right
    head = random_mtp(target.config, modules, seed=1, dtype="float64")
    report = greedy_identity(target, lambda: MtpProposer(head, depth=3, top_k=top_k), torch.tensor([[4, 1, 2]]), 20)
    assert report.equal, report.first_difference


def test_a_depth_past_the_modules_reuses_the_last():
    head = random_mtp(tiny_random_model("llama").config, num_modules=2)
    assert [head.module_for(step) for step in range(5)] == [0, 1, 1, 1, 1]
    # the module chosen is the one that runs: a level read at depth 3 through module 1 only changes with module 1
    embedded, feature, positions = torch.randn(1, 2, 32), torch.randn(1, 2, 32), torch.tensor([[5, 6]])
    before = head(embedded, feature, positions, step=3)
    with torch.no_grad():
        head.layers[0].input_proj.weight.mul_(2.0)
    assert torch.equal(head(embedded, feature, positions, step=3), before)
    with torch.no_grad():
        head.layers[1].input_proj.weight.mul_(2.0)
    assert not torch.allclose(head(embedded, feature, positions, step=3), before)


def test_the_committed_positions_go_through_the_chain_of_modules():
    """Step 0: module 1 reads module 0's output (its KV then holds what a depth-2 draft would have read)."""
    head = random_mtp(tiny_random_model("llama").config, num_modules=2)
    embedded, feature, positions = torch.randn(1, 3, 32), torch.randn(1, 3, 32), torch.arange(3)[None]
    rope = head.rotary(embedded, positions, **head.rope_type)
    first = head.layers[0](embedded, feature, rope)
    assert torch.allclose(head(embedded, feature, positions, step=0), first)
    assert torch.allclose(head(embedded, first, positions, step=1), head.layers[1](embedded, first, rope))


def test_our_speculators_layout_reads_back_exactly(tmp_path):
    target = tiny_random_model("qwen3", seed=3, init_std=0.3)
    head = random_mtp(target.config, num_modules=2, seed=4)
    config = write_speculators(head, tmp_path / "mtp", dtype=torch.float32)
    import json

    written = json.loads((config / "config.json").read_text())
    assert written["speculators_model_type"] == "mtp" and written["num_nextn_predict_layers"] == 2
    back = read_mtp(tmp_path / "mtp")
    assert back.state_dict().keys() == head.state_dict().keys()
    assert all(torch.equal(back.state_dict()[k], v) for k, v in head.state_dict().items())
    first = greedy_identity(target, lambda: MtpProposer(back, depth=3), PROMPT, 12)
    assert first.equal


def test_a_folder_without_mtp_tensors_is_named(tmp_path):
    tiny_random_model("llama").save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="holds no MTP module"):
        read_mtp(str(tmp_path / "plain"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        read_mtp(str(tmp_path / "nowhere"))
    with pytest.raises(TypeError, match=r"MtpProposer: `modules` takes a loaded head, not a path .*"
                                        r"models\.mtp\.modules\.path=<folder>.*proposers\.mtp\.layouts\.read_mtp"):
        MtpProposer(str(tmp_path / "plain"))  # the config loads the modules; the proposer only drives them


def test_a_head_for_another_target_is_refused_naming_both_sides():
    head = tiny_mtp("llama", vocab_size=64, hidden_size=32, num_layers=2)
    for other, named in ((tiny_random_model("llama", vocab_size=80), "vocabulary 64 (this target: 80)"),
                         (tiny_random_model("llama", num_layers=3), "layer count 2 (this target: 3)"),
                         (tiny_random_model("qwen3"), "model type llama (this target: qwen3)")):
        proposer = MtpProposer(head)
        with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
            proposer.prefill(PROMPT, HFTarget(other))
    with pytest.raises(ValueError, match="width 48"):
        MtpHead(head.config.__class__(1, 48, 64, 2, "llama"), tiny_random_model("llama").config)


def test_bad_settings_are_named():
    head = tiny_mtp("llama", vocab_size=64, hidden_size=32, num_layers=2)
    with pytest.raises(ValueError, match="depth"):
        MtpProposer(head, depth=0)
    with pytest.raises(ValueError, match="at least one module"):
        random_mtp(tiny_random_model("llama").config, num_modules=0)


def test_the_zoo_module_decodes_the_zoo_target_as_plain_greedy_does():
    """The committed module (experiments/zoo/mtp, speculators MTP layout) on the zoo target: its searched tree
    (`auto`) and a chain, greedy-identical to plain decoding, and drafting tokens the target accepts."""
    from engine.loop import generate
    from framework.core.sampling import SamplingConfig
    from framework.zoo.checkpoints import load_causal_lm

    target = load_causal_lm("target", dtype="float32")
    head = read_mtp("mtp")
    assert head.searched["top_k"] >= 1 and head.searched["chain_depth"] >= 1
    head.check_target(target)
    prompt = torch.tensor([[4, 1023, 308, 11, 220, 220, 220, 1320, 7, 44]])  # any ids of its 6144-token vocabulary
    for make in (lambda: MtpProposer(head, depth="auto", top_k="auto", budget="auto"),
                 lambda: MtpProposer(head, depth=2)):
        report = greedy_identity(target, make, prompt, 24)
        assert report.equal, report.first_difference
    stats = generate(HFTarget(target), MtpProposer(head, depth=2), prompt, 24, SamplingConfig(temperature=0.0)).stats
    assert stats.accepted_total > 0
