"""The cost model on known costs: nested tables, step records read off a generation, predictions, the profile file,
and experiments.profile_device on the tiny target."""

import json
from dataclasses import replace

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from engine.loop import generate
from experiments.profile_device import profile
from framework.control.cost_model import STEP_FIELDS, Prediction, StepRecord, predict, step_records, steps_of
from framework.control.costs import StepCosts
from framework.control.device_profile import DeviceProfile, interpolate
from framework.control.roofline import Accelerator, ModelSize, Projection, forward_s
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from measurement.common import CONF
from proposers.ngram.prompt_lookup import PromptLookupProposer


def simple_profile(**changes) -> DeviceProfile:
    """Costs linear in every axis, so that any lookup has a value to work out by hand."""
    tables = dict(
        hardware={"cpu": "test"}, target="toy",
        forward={1: {0: {0: 1.0, 10: 2.0}, 100: {0: 2.0, 10: 3.0}}, 3: {0: {0: 2.0, 10: 4.0}, 100: {0: 3.0, 10: 5.0}}},
        prefill={"plain": {1: {0: 0.5, 100: 1.5}}, "pld": {1: {0: 1.0, 100: 2.0}}},
        draft={"pld": {"greedy": {1: {0: 0.0, 1: 0.1, 3: 0.5}}}},
        verify={"plain": {"greedy": {1: {0: 0.01}}}, "pld": {"greedy": {1: {0: 0.01, 10: 0.11}}}},
        other={"plain": {1: 0.02}, "pld": {1: 0.03}},
    )
    return DeviceProfile(**{**tables, **changes})


def test_nested_tables_interpolate_along_each_axis_and_extend_past_the_ends():
    forward = simple_profile().forward
    assert interpolate(forward, 1, 50, 5) == pytest.approx(2.0)  # the middle of the (context, nodes) square
    assert interpolate(forward, 2, 0, 10) == pytest.approx(3.0)  # halfway between batch 1 and 3
    assert interpolate(forward, 1, 200, 20) == pytest.approx(5.0)  # past both ends: their slopes go on
    assert interpolate({0: 4.0}, 7) == 4.0  # one point: flat
    with pytest.raises(ValueError, match="deeper than the lookup"):
        interpolate(forward, 1, 0)


def test_a_prediction_sums_each_steps_parts_from_the_tables():
    steps = [StepRecord(rows=1, nodes=10, levels=3, context=100), StepRecord(rows=1, nodes=0, levels=0, context=104)]
    got = predict(simple_profile(), "pld", "greedy", [40], steps)
    assert got == Prediction(start_s=1.4, draft_s=0.5 + 0.0, target_s=3.0 + 2.04, verify_s=0.11 + 0.01, other_s=0.06)
    assert got.seconds == pytest.approx(1.4 + 0.5 + 5.04 + 0.12 + 0.06)
    # a packed step (one of three rows drafted) pays a third of its nodes per row
    shared = predict(simple_profile(), "pld", "greedy", [0, 0, 0], [StepRecord(3, 9, 1, 0, drafting=1)])
    assert shared.target_s == pytest.approx(2.0 + 2.0 * 3 / 10) and shared.verify_s == pytest.approx(0.04)
    # side rows are positions of each row, as nodes are; a measured scale multiplies the method's forwards
    side = predict(simple_profile(), "pld", "greedy", [0], [StepRecord(1, 2, 1, 0, side_rows=3)])
    assert side.target_s == pytest.approx(1.5) and side.verify_s == pytest.approx(0.03)
    scaled = simple_profile(target_scale={"pld": {"greedy": {1: 1.2}}})
    assert predict(scaled, "pld", "greedy", [0], [StepRecord(1, 2, 1, 0, side_rows=3)]).target_s == pytest.approx(1.8)
    # unmeasured: 1
    assert predict(scaled, "plain", "greedy", [0], [StepRecord(1, 0, 0, 0)]).target_s == pytest.approx(1.0)


def test_plain_decoding_drafts_nothing_and_an_unprofiled_method_is_named():
    assert predict(simple_profile(), "plain", "greedy", [0], [StepRecord(1, 0, 0, 0)]).draft_s == 0.0
    with pytest.raises(ValueError, match=r"no 'eagle3'.*experiments.profile_device"):
        predict(simple_profile(), "eagle3", "greedy", [0], [StepRecord(1, 0, 0, 0)])
    with pytest.raises(ValueError, match=r"draft\[pld\] table has no 't1'"):
        predict(simple_profile(), "pld", "t1", [0], [StepRecord(1, 0, 0, 0)])


def test_a_profile_file_round_trips_and_a_wrong_file_is_named(tmp_path):
    path = tmp_path / "profile.json"
    simple_profile().save(path)
    again = DeviceProfile.load(path)  # JSON's string keys are numbers again
    assert again.forward == simple_profile().forward and again.forward_s(1, 50, 5) == pytest.approx(2.0)
    (tmp_path / "other.json").write_text(json.dumps({"forward": {}}))
    with pytest.raises(ValueError, match="not a device profile: it lacks"):
        DeviceProfile.load(tmp_path / "other.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON list"):
        DeviceProfile.load(tmp_path / "list.json")
    with pytest.raises(FileNotFoundError, match="experiments.profile_device writes one"):
        DeviceProfile.load(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="'measured' or 'projection'"):
        simple_profile(kind="guess")


def test_step_records_follow_each_rows_context_as_it_grows():
    """Two prompts of 4 and 9 tokens: a row's context starts at its prompt and first token and grows by what each
    step kept; after its last step it holds the prompt and every new token."""
    target = HFTarget(tiny_random_model("llama"))
    prompts = [[5, 6, 7, 5], [1, 2, 3, 1, 2, 3, 1, 2, 3]]
    out = generate(target, PromptLookupProposer(depth=3, max_ngram=2), prompts, 10)
    steps = step_records(out.stats.steps, [4, 9])
    assert steps[0].context == pytest.approx((5 + 10) / 2) and all(s.rows == 2 for s in steps)
    for before, after, stats in zip(steps, steps[1:], out.stats.steps):
        assert after.context - before.context == pytest.approx(float(stats.emitted.float().mean()))
    assert steps[-1].context + float(out.stats.steps[-1].emitted.float().mean()) == pytest.approx((4 + 9) / 2 + 10)
    assert [s.nodes for s in steps] == [s.nodes for s in out.stats.steps]
    assert steps_of({k: [getattr(s, k) for s in steps] for k in STEP_FIELDS}) == steps  # a record's columns
    with pytest.raises(ValueError, match="lacks"):
        steps_of({"rows": [1]})


def test_the_device_profile_app_measures_every_table_on_the_tiny_target(tmp_path):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="profile_device", overrides=[
            "models=tiny", "methods=[plain,prompt_lookup]", "samplings=[greedy]", "contexts=[16,32]",
            "nodes=[0,1,4]", "prompt_tokens=[8,16]", "levels=[0,2]", "max_new_tokens=6", "repeats=1",
            f"out={tmp_path}/p.json"])
    got = profile(cfg)
    assert set(got.forward[1]) == {16, 32} and set(got.forward[1][16]) == {0, 1, 4}
    assert set(got.prefill) == {"plain", "prompt_lookup"} and set(got.prefill["plain"][1]) == {8, 16}
    assert set(got.draft) == {"prompt_lookup"} and 0 in got.draft["prompt_lookup"]["greedy"][1]
    assert set(got.target_scale) == {"plain", "prompt_lookup"} and got.target_scale["plain"]["greedy"][1] > 0
    steps = [StepRecord(1, 3, 2, 20), StepRecord(1, 0, 0, 23)]
    assert predict(got, "prompt_lookup", "greedy", [12], steps).seconds > 0
    with pytest.raises(ValueError, match="nodes must start at 0"):
        profile(compose_override(cfg, "nodes", [1, 300]))
    positions = instantiate(cfg.target).config.max_position_embeddings
    with pytest.raises(ValueError, match=f"the target has {positions}: lower contexts"):
        profile(compose_override(cfg, "contexts", [positions]))


def compose_override(cfg, key, value):
    changed = cfg.copy()
    changed[key] = value
    return changed



H100 = Accelerator("H100", bandwidth=3.35e12, flops=9.89e14, source="datasheet", bandwidth_share=1.0, flops_share=1.0,
                   launch_s=0.0)
EIGHT_B = ModelSize(parameters=7.5e9, layers=32, width=4096, kv_values=2048)


def test_the_roofline_is_bandwidth_bound_for_one_token_and_compute_bound_for_many():
    alone = forward_s(H100, EIGHT_B, rows=1, context=0, tokens_per_row=1)
    assert alone == pytest.approx(2 * (7.5e9 + 32 * 2048) / 3.35e12)  # the weights and one token's cache, read once
    many = forward_s(H100, EIGHT_B, rows=64, context=0, tokens_per_row=64)  # 4096 tokens: past the ridge
    assert many == pytest.approx(2 * 7.5e9 * 4096 / 9.89e14 + 4 * 32 * 4096 * 4096 * 64 / 9.89e14)
    assert forward_s(H100, EIGHT_B, 1, 0, 8) == pytest.approx(alone, rel=1e-3)  # a few nodes are nearly free there
    shared = Accelerator("x", 1e12, 1e14, "s", launch_s=0.0)  # the assumed shares of peak: 0.8 and 0.6
    assert forward_s(shared, EIGHT_B, 1, 0, 1) == pytest.approx(2 * (7.5e9 + 32 * 2048) / 0.8e12)
    assert forward_s(shared, EIGHT_B, 64, 0, 64) == pytest.approx(
        (2 * 7.5e9 * 4096 + 4 * 32 * 4096 * 4096 * 64) / 0.6e14)
    launched = Accelerator("x", 1e12, 1e14, "s", launch_s=1e-5)
    assert forward_s(launched, EIGHT_B, 1, 0, 1) - forward_s(replace(launched, launch_s=0.0), EIGHT_B, 1, 0, 1) == \
        pytest.approx(32 * 12 * 1e-5)
    with pytest.raises(ValueError, match="shares in"):
        Accelerator("x", 1e12, 1e14, "s", bandwidth_share=1.5)


def test_a_projection_replaces_model_forwards_and_keeps_host_work_as_measured():
    measured = simple_profile()
    drafter = ModelSize(parameters=1e9, layers=16, width=2048, kv_values=1024)
    got = Projection(H100, EIGHT_B, {"pld": None}).of(measured)
    assert got.kind == "projection" and got.hardware["projected onto"] == "H100"
    assert got.forward_s(1, 100, 10) == pytest.approx(forward_s(H100, EIGHT_B, 1, 100, 11))
    assert got.draft == measured.draft and got.verify == measured.verify and got.other == measured.other
    modelled = Projection(H100, EIGHT_B, {"pld": drafter}, draft_context=64).of(measured)
    assert modelled.draft_s("pld", "greedy", 1, 3) == pytest.approx(3 * forward_s(H100, drafter, 1, 64, 1))
    assert modelled.draft_s("pld", "greedy", 1, 0) == pytest.approx(forward_s(H100, drafter, 1, 64, 1))  # its catch-up
    together = Projection(H100, EIGHT_B, {"pld": replace(drafter, parallel=True)}, draft_context=64).of(measured)
    assert together.draft_s("pld", "greedy", 1, 3) == pytest.approx(forward_s(H100, drafter, 1, 64, 3))
    assert modelled.prefill_s("pld", 1, 100) == pytest.approx(forward_s(H100, EIGHT_B, 1, 0, 100)
                                                              + forward_s(H100, drafter, 1, 0, 100))
    with pytest.raises(ValueError, match="needs 'pld'"):
        Projection(H100, EIGHT_B, {}).of(measured)


def test_a_profile_gives_a_methods_step_costs_at_a_batch_size():
    """What a cost-sized policy decides by: the forward by nodes at the middle context (or the one asked for) times
    the method's scale, drafting and verification as lines, the rest per step; a method it lacks is named."""
    costs = simple_profile(target_scale={"pld": {"greedy": {1: 1.5}}}).step_costs("pld", "greedy", 1)
    assert costs.target == pytest.approx({0: 3.0, 10: 4.5})  # context 100 (of 0 and 100), x 1.5
    assert costs.draft == pytest.approx((0.0, 0.2))  # 0.1 at one level, 0.3 at two: 0.2 a level, none per step
    assert costs.verify == pytest.approx((0.01, 0.01)) and costs.rest == pytest.approx(0.03)
    assert simple_profile().step_costs("pld", "greedy", 1, context=0).target == pytest.approx({0: 1.0, 10: 2.0})
    with pytest.raises(ValueError, match=r"draft table has no 'eagle3' .*profile_device 'methods=\[..., eagle3\]'"):
        simple_profile().step_costs("eagle3", "greedy", 1)
    with pytest.raises(ValueError, match=r"step costs are seconds >= 0, got draft \(-1.0, 0.1\)"):
        StepCosts({0: 1.0}, (-1.0, 0.1), (0.0, 0.0), 0.0)
    with pytest.raises(ValueError, match="a cost table needs a positive cost at 0 nodes"):
        StepCosts({1: 1.0}, (0.0, 0.1), (0.0, 0.0), 0.0)
