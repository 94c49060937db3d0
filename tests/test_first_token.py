"""experiments.first_token end to end on a tiny target: the sampled first token follows the target's
law (and a planted bias is caught), the draft's first-candidate law is recorded, the plot is written."""

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from engine.loop import DecodeOptions, Decoder
from experiments.first_token import run
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.lm.target import HFTarget
from measurement.first_token_tables import OneLevel, SharedPrefix, first_tokens, summarise
from tests.composed import composed
from verifiers import typical_verifier

CONF = Path(__file__).resolve().parents[1] / "conf"


def load(*overrides: str):
    return composed("first_token", *overrides)


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


def test_the_standardized_spread_is_one_for_the_law_itself_and_not_for_a_nearby_one():
    g = torch.Generator().manual_seed(0)
    target = torch.softmax(3 * torch.randn(2000, generator=g, dtype=torch.float64), 0)
    near = torch.softmax(1.02 * torch.log(target), 0)  # the same law at temperature 1 / 1.02: TV 0.015
    exact = summarise(torch.multinomial(target, 10**6, replacement=True, generator=g).bincount(minlength=2000).double(),
                      target)
    off = summarise(torch.multinomial(near, 10**6, replacement=True, generator=g).bincount(minlength=2000).double(),
                    target)
    assert exact["standardized_tokens"] > 500 and 0.9 < exact["standardized_std"] < 1.1
    assert off["standardized_std"] > 1.3 and not off["g_test_passes"]


def tiny(proposer: str):
    cfg = load("models=tiny", f"proposer={proposer}")
    return instantiate(cfg.target), instantiate(cfg.proposer), torch.tensor([cfg.prompt])


def test_a_point_tree_fans_out_one_step_to_every_run_and_a_lossy_rule_is_caught():
    """Medusa's tree is fixed by the prompt: one step at batch 1, 8,192 verifications. Through the same fan-out,
    typical acceptance (lossy) fails the G-test."""
    model, factory, prompt = tiny("medusa")
    sampling = SamplingConfig(temperature=2.0)  # a flat law: typical acceptance takes what the target would not
    exact = first_tokens(model, factory, prompt, sampling, 8192, 1024, 0)
    assert exact["fanned"] and summarise(exact["counts"], exact["target"])["g_test_passes"]
    lossy = first_tokens(model, factory, prompt, sampling, 8192, 1024, 0, verifier=typical_verifier())
    assert lossy["fanned"] and not summarise(lossy["counts"], lossy["target"])["g_test_passes"]


def test_a_drawn_tree_runs_every_row_and_a_lossy_rule_is_caught():
    """Each run draws its own chain; the target runs on the union of their trees (SharedPrefix). Typical
    acceptance on the same runs fails the G-test."""
    model, factory, prompt = tiny("draft")
    sampling = SamplingConfig(temperature=2.0)
    exact = first_tokens(model, factory, prompt, sampling, 4096, 1024, 0)
    assert not exact["fanned"] and exact["counts"].sum() == 4096
    assert summarise(exact["counts"], exact["target"])["g_test_passes"]
    lossy = first_tokens(model, factory, prompt, sampling, 4096, 1024, 0, verifier=typical_verifier())
    assert not summarise(lossy["counts"], lossy["target"])["g_test_passes"]


@pytest.mark.parametrize("max_nodes", [2048, 1])
def test_rows_that_drew_the_same_tree_share_one_target_forward(max_nodes):
    """The union of the rows' trees runs at batch 1 and gives every row the whole target's laws; a union over
    max_nodes is split by rows (max_nodes=1: down to single rows)."""
    model, factory, prompt = tiny("draft")
    shared, whole = SharedPrefix(HFTarget(model), max_nodes=max_nodes), HFTarget(model)
    outs = []
    for target in (shared, whole):
        decoder = Decoder(target, factory(), SamplingConfig(temperature=0.5), TorchSource(seed=3),
                          options=DecodeOptions(policy=OneLevel()))
        decoder.prefill(prompt[:, :-1], copies=64, root=prompt[0, -1:])
        outs.append(decoder.step())
    assert torch.equal(outs[0], outs[1])  # the same coins give the same tokens: the laws are the whole target's
    if max_nodes > 64:
        assert shared.forwards == 1 and 1 <= shared.nodes < 64  # 64 one-node chains, some drawn alike
    else:
        assert shared.forwards > 1


def test_shared_prefix_laws_equal_the_whole_targets_on_a_deep_tree():
    """Node by node, a 3-level tree's laws from the union forward equal each row's own forward."""
    model, _, prompt = tiny("draft")
    shared, whole = SharedPrefix(HFTarget(model)), HFTarget(model)
    torch.manual_seed(0)
    tokens = torch.randint(0, 4, (16, 6))  # few ids: rows share paths
    tree = CandidateTree(tokens, torch.tensor([-1, -1, 0, 0, 2, 1]))
    shared.prefill(prompt[:, :-1])
    whole.prefill(prompt[:, :-1].expand(16, -1))
    root = prompt[0, -1:].expand(16)
    got, want = shared.forward_tree(root, tree), whole.forward_tree(root, tree)
    assert shared.forwards == 1 and shared.nodes < 16 * 6
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="share one root"):
        shared.forward_tree(torch.arange(16), tree)


def test_shared_prefix_keeps_the_laws_it_met_for_the_next_round():
    """A second round of the same prompt and root prefills nothing and runs only the paths it has not met; with no
    budget for kept laws it runs them all again; another prompt starts afresh."""
    model, _, prompt = tiny("draft")
    torch.manual_seed(1)
    tree = CandidateTree(torch.randint(0, 4, (16, 3)), torch.tensor([-1, 0, 0]))
    wider = CandidateTree(torch.cat([tree.tokens[:, :2], torch.full((16, 1), 7)], dim=1), tree.parents)  # one new path
    root = prompt[0, -1:].expand(16)
    for kept_bytes, forwards in ((2**30, 2), (0, 3)):
        shared = SharedPrefix(HFTarget(model), kept_bytes=kept_bytes)
        first = shared.prefill(prompt[:, :-1])
        once = shared.forward_tree(root, tree)
        assert shared.prefill(prompt[:, :-1]) is first
        again = shared.forward_tree(root, tree)
        torch.testing.assert_close(again.logits, once.logits)
        shared.forward_tree(root, wider)
        assert shared.forwards == forwards
        if kept_bytes:  # the first: each distinct path once; the second: each new (first, 7) and its ancestor
            firsts = len(set(tree.tokens[:, 0].tolist()))
            pairs = set(map(tuple, tree.tokens[:, :2].tolist())) | set(map(tuple, tree.tokens[:, ::2].tolist()))
            assert shared.nodes == firsts + len(pairs) + 2 * firsts
    shared.prefill(prompt[:, 1:-1])
    assert not shared.index


def test_a_stopped_run_resumes_to_the_same_counts(tmp_path):
    """Rounds are seeded apart: 3 rounds in one go equal 1 round, stopped, then resumed to 3 from the partial."""
    for proposer in ("medusa", "draft"):
        model, factory, prompt = tiny(proposer)
        whole = first_tokens(model, factory, prompt, SamplingConfig(), 768, 256, 5)
        partial = tmp_path / f"{proposer}.json"
        first_tokens(model, factory, prompt, SamplingConfig(), 256, 256, 5, partial=partial)
        assert json.loads(partial.read_text())["done"] == 256
        resumed = first_tokens(model, factory, prompt, SamplingConfig(), 768, 256, 5, partial=partial)
        assert torch.equal(resumed["counts"], whole["counts"]) and json.loads(partial.read_text())["done"] == 768
        other = first_tokens(model, factory, prompt, SamplingConfig(), 768, 256, 6, partial=partial)  # another seed
        assert not torch.equal(other["counts"], whole["counts"])
