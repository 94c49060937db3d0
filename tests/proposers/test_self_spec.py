"""Self-speculation (early exit, layer skipping): the view runs the target's own modules and equals a model built
with those layers, greedy identity and exact laws through the shared verifier, the measured choices, bad input."""

from __future__ import annotations

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.layer_view import layer_subset
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, greedy_identity, teacher_forced_law
from proposers import EarlyExitProposer, LayerSkipProposer
from proposers.self_spec import proposer as self_spec
from proposers.self_spec.choose import Calibration, best_exit, best_skip_set, expected_tokens

PROMPT = torch.tensor([[5, 9, 2, 31, 7, 7, 12, 40, 3, 9, 5, 9, 2, 31]])


@pytest.fixture(scope="module")
def model():
    return tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=4, num_heads=4, num_kv_heads=2,
                             max_positions=128, seed=3, init_std=0.3)


def rebuilt(model, layers):
    """The same layers' weights loaded into a freshly built model of that many layers: what a view must equal."""
    config = type(model.config).from_dict(model.config.to_dict())
    config.num_hidden_layers = len(layers)
    fresh = type(model)(config).eval()
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("model.layers."):
            index = int(key.split(".")[2])
            if index not in layers:
                continue
            key = key.replace(f"model.layers.{index}.", f"model.layers.{layers.index(index)}.", 1)
        state[key] = value
    fresh.load_state_dict(state)
    return fresh


@pytest.mark.parametrize("layers", [(0,), (0, 1, 2), (0, 2, 3), (1, 3)])
def test_a_view_shares_the_targets_modules_and_computes_what_a_model_of_those_layers_does(model, layers):
    view = layer_subset(model, layers)
    assert all(any(p is q for q in model.parameters()) for p in view.parameters())  # nothing copied
    ids = PROMPT
    with torch.no_grad():
        torch.testing.assert_close(view(input_ids=ids, use_cache=False).logits,
                                   rebuilt(model, list(layers))(input_ids=ids).logits)
        full = model(input_ids=ids).logits
        assert not torch.allclose(view(input_ids=ids, use_cache=False).logits, full)  # the view is not the target


@pytest.mark.parametrize("make", [lambda: EarlyExitProposer(exit_layer=2, depth=3),
                                  lambda: EarlyExitProposer(exit_layer=1, branching=2, depth=2, kind="wor"),
                                  lambda: LayerSkipProposer(skip=[1, 2], depth=3, stop_below=0.0)],
                         ids=["early_exit_chain", "early_exit_tree", "layer_skip"])
def test_greedy_is_plain_greedy(model, make):
    report = greedy_identity(model, make, PROMPT, 24)
    assert report.equal, report


def test_the_drafts_come_from_the_view_and_some_are_accepted(model):
    """Exit after 3 of 4 layers of a peaked random target: its drafts agree often; a view from other layers less."""
    out = generate(HFTarget(model), EarlyExitProposer(exit_layer=3, depth=3, stop_below=0.0),
                   PROMPT, 24, SamplingConfig(temperature=0))
    assert out.stats.accepted_total > 0


@pytest.mark.parametrize("make, tokens", [
    (lambda: EarlyExitProposer(exit_layer=1, depth=2, stop_below=0.0), 3),
    (lambda: LayerSkipProposer(skip=[0], branching=2, kind="wor", depth=2), 2),  # a tree's coins: 2 tokens
], ids=["early_exit", "layer_skip_tree"])
def test_the_law_is_the_targets_exactly(make, tokens):
    """Exact enumeration of every coin on a toy target: the law of the first tokens with self-drafts equals plain
    sampling's."""
    target = tiny_random_model("llama", vocab_size=6, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1,
                               max_positions=32, seed=1, init_std=0.5, dtype="float64")
    prompt, sampling = torch.tensor([[1, 2, 0]]), SamplingConfig(temperature=0.7, top_k=3)
    assert compare(exact_loop_law(target, make, prompt, tokens, sampling),
                   teacher_forced_law(target, prompt, tokens, sampling)).passes(1e-9)


def test_auto_chooses_by_measured_agreement_and_cost(model):
    calibration = Calibration(model, PROMPT, depth=3)
    exit_choice = best_exit(calibration)
    scores = [calibration.score(tuple(range(E))) for E in range(1, 4)]
    assert exit_choice.layers in {s.layers for s in scores}
    assert exit_choice.speed >= max(s.speed for s in scores) * 0.8  # timings are remeasured: noisy, not random
    assert 0.0 <= exit_choice.agreement <= 1.0 and exit_choice.cost > 0
    assert expected_tokens(0.0, 3) == 1.0 and expected_tokens(1.0, 3) == 4.0
    skip = best_skip_set(calibration)
    assert skip.layers[0] == 0 and skip.layers[-1] == 3  # the first and last layers stay
    proposer = EarlyExitProposer(exit_layer="auto", depth=3)
    proposer.prefill(PROMPT, HFTarget(model))
    assert proposer.layers == self_spec._chosen[model]["exit/3"]  # measured once per target, then remembered
    assert len(proposer.layers) in (1, 2, 3)


@pytest.mark.parametrize("make, message", [
    (lambda: EarlyExitProposer(exit_layer=4), r"exit_layer 4 is outside 1\.\.3"),
    (lambda: EarlyExitProposer(exit_layer=0), r"exit_layer 0 is outside 1\.\.3"),
    (lambda: EarlyExitProposer(exit_layer="half"), "exit_layer must be a layer count or 'auto'"),
    (lambda: LayerSkipProposer(skip=[0, 1, 2, 3]), "skip names every one of the target's 4 layers"),
    (lambda: LayerSkipProposer(skip=[1, 9]), r"skip names layers \[9\] that this 4-layer target lacks"),
    (lambda: LayerSkipProposer(skip=[]), "skip names no layer"),
    (lambda: LayerSkipProposer(skip="1,2"), "skip must be a list of layer indices"),
])
def test_bad_input_is_named(model, make, message):
    with pytest.raises(ValueError, match=message):
        make().prefill(PROMPT, HFTarget(model))


def test_a_model_without_a_decoder_stack_is_named():
    gpt2 = tiny_random_model("gpt2", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=4,
                             max_positions=64, seed=0)
    with pytest.raises(ValueError, match="keeps no decoder stack at `model.layers`"):
        EarlyExitProposer(exit_layer=1).prefill(PROMPT, HFTarget(gpt2))


def saved_target(tmp_path, model):
    model.save_pretrained(tmp_path / "target")
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(tmp_path / "target").eval()


def test_search_layers_writes_the_choice_beside_the_target_and_auto_reads_it(model, tmp_path, monkeypatch):
    """python -m experiments.search_layers measures on the target's continuations of the workload's prompts and saves
    the choice beside it; `auto` then drafts with the saved layers without measuring anything."""
    import json

    from experiments.search_layers import search
    from tests.test_configs import load

    model.save_pretrained(tmp_path / "target")
    cfg = load(f"target.path={tmp_path / 'target'}", "prompt=[5,9,2,31,7,7,12,40,3,9]", "search.prompts=1",
               "search.new_tokens=8", "search.depths=[3]", config_name="search_layers")
    written = search(cfg)
    saved = json.loads(written.read_text())
    assert written == tmp_path / "target" / "self_speculation.json" and saved["num_layers"] == 4
    assert set(saved["choices"]) == {"exit/3", "skip/3"} and len(saved["choices"]["exit/3"]["layers"]) in (1, 2, 3)
    # hand-written choices, and measuring made to fail: only the file can give the layers
    saved["choices"] = {"exit/3": {"layers": [0, 1]}, "skip/3": {"layers": [0, 3]}}
    written.write_text(json.dumps(saved))
    monkeypatch.setattr(self_spec, "best_exit", lambda calibration: pytest.fail("measured despite the saved file"))
    monkeypatch.setattr(self_spec, "best_skip_set", lambda calibration: pytest.fail("measured despite the saved file"))
    loaded = saved_target(tmp_path, model)
    for proposer, layers in ((EarlyExitProposer(exit_layer="auto", depth=3), (0, 1)),
                             (LayerSkipProposer(skip="auto", depth=3), (0, 3))):
        proposer.prefill(PROMPT, HFTarget(loaded))
        assert proposer.layers == layers
    out = generate(HFTarget(loaded), LayerSkipProposer(skip="auto", depth=3), PROMPT, 8,
                   SamplingConfig(temperature=0.0))
    plain = generate(HFTarget(loaded), None, PROMPT, 8, SamplingConfig(temperature=0.0))
    assert torch.equal(out.tokens, plain.tokens)


@pytest.mark.parametrize("choices, num_layers, message", [
    ({"exit/4": {"layers": [0, 1]}}, 6, r"measured on a 6-layer target, this one has 4 layers"),
    ({"exit/4": {"layers": [0, 1, 2, 3]}}, 4, r"exit/4 keeps layers \[0, 1, 2, 3\], not a proper subset"),
    ({"exit/4": {"layers": [0, 7]}}, 4, r"exit/4 keeps layers \[0, 7\], not a proper subset"),
])
def test_a_saved_choice_that_does_not_fit_the_target_is_named(model, tmp_path, choices, num_layers, message):
    import json

    loaded = saved_target(tmp_path, model)
    (tmp_path / "target" / "self_speculation.json").write_text(json.dumps({"num_layers": num_layers,
                                                                           "choices": choices}))
    with pytest.raises(ValueError, match="self_speculation.json.*" + message):
        EarlyExitProposer(exit_layer="auto", depth=4).prefill(PROMPT, HFTarget(loaded))


def test_a_measured_choice_that_loses_to_plain_decoding_is_said(model, monkeypatch):
    from proposers.self_spec.choose import ViewScore

    monkeypatch.setattr(self_spec, "_chosen", __import__("weakref").WeakKeyDictionary())
    monkeypatch.setattr(self_spec, "best_exit", lambda calibration: ViewScore((0,), 0.1, 0.2, 0.62))
    with pytest.warns(UserWarning, match=r"exit/3.*score 0\.620 \(below 1.*expect plain decoding to be faster"):
        EarlyExitProposer(exit_layer="auto", depth=3).prefill(PROMPT, HFTarget(model))


def test_the_layerskip_objective_scores_each_exit_with_the_law_early_exit_drafts_from(model):
    """Its exit at E is the next-token cross-entropy of the view of the first E layers (what early_exit drafts with);
    layer dropout rises with depth and never leaves the first layer out; the draws repeat for a step."""
    import torch.nn.functional as F

    from proposers.self_spec.training import EarlyExitObjective

    blocks = PROMPT[:, :10]
    objective = EarlyExitObjective(exits=(1, 3), exits_per_step=3, exit_weight=0.5, layer_dropout=0.0)
    kept, exits = objective.draw(4, step=0)
    assert kept == (0, 1, 2, 3) and exits == [1, 2, 3]
    with torch.no_grad():
        final = F.cross_entropy(model(input_ids=blocks).logits[0, :-1], blocks[0, 1:])
        early = [F.cross_entropy(layer_subset(model, tuple(range(E)))(input_ids=blocks, use_cache=False).logits[0, :-1],
                                 blocks[0, 1:]) for E in exits]
        loss = objective(model, blocks, step=0, bf16=False)
    torch.testing.assert_close(loss, final + 0.5 * torch.stack(early).mean())
    dropping = EarlyExitObjective(exits=(1, 3), layer_dropout=0.9)
    draws = [dropping.draw(4, step) for step in range(200)]
    assert all(kept[0] == 0 for kept, _ in draws) and draws[7] == dropping.draw(4, 7)
    left_out = [sum(layer not in kept for kept, _ in draws) for layer in range(4)]
    assert left_out[0] == 0 < left_out[1] < left_out[3]  # rates 0, 0.3, 0.6, 0.9
    assert all(E - 1 in kept and E - 1 != kept[-1] for kept, exits in draws for E in exits)
    with pytest.raises(ValueError, match=r"exits \(1, 4\) must lie in 1\.\.3"):
        EarlyExitObjective(exits=(1, 4)).draw(4, 0)


def test_the_fine_tunes_exit_agreement_is_each_views_top1_against_the_targets(model):
    from recipes.layerskip import exit_agreement

    blocks = torch.cat([PROMPT, PROMPT.flip(1)])[:, :12]  # [2, 12]
    measured = exit_agreement(model, blocks, batch_size=1)
    with torch.no_grad():
        final = model(input_ids=blocks).logits.argmax(-1)
        for E in (1, 2, 3):
            view = layer_subset(model, tuple(range(E)))(input_ids=blocks, use_cache=False).logits.argmax(-1)
            assert measured[E] == pytest.approx(float((view == final).float().mean()))
    assert set(measured) == {1, 2, 3}
