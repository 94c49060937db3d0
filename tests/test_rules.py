"""experiments.rules: every (proposer, sampling, verifier) cell measured on the same prompts, rows kept as they come."""

import json

import pytest

from experiments.rules import measure, table
from tests.composed import composed


def load(*overrides):
    return composed("rules", *overrides)


def test_every_cell_is_measured_and_kept(tmp_path):
    cfg = load("experiment.proposers=[draft]", "experiment.samplings=[t1]", "experiment.verifiers=[token,typical]",
               "experiment.prompts=1", "experiment.max_new_tokens=4",
               "~experiment.variants",
               "+experiment.variants={short: {config: draft, set: {depth: 2, stop_below: 0}}}")
    rows = measure(cfg, tmp_path / "rules.jsonl")
    assert [(r["proposer"], r["verifier"]) for r in rows] == [
        ("draft", "token"), ("draft", "typical"), ("short", "token"), ("short", "typical")]
    assert all(r["tokens_per_forward"] >= 1 and r["sampled_tokens_per_forward"] >= 1 and r["steps"] >= 1 for r in rows)
    assert [r["lossless"] for r in rows] == [True, False, True, False]
    kept = [json.loads(line) for line in (tmp_path / "rules.jsonl").read_text().splitlines()]
    assert kept == rows
    assert "typical (lossy)" in table(rows) and "1.000x" in table(rows)


def test_a_variant_setting_the_proposer_does_not_have_is_named():
    cfg = load("experiment.proposers=[]", "experiment.prompts=1", "~experiment.variants",
               "+experiment.variants={bad: {config: draft, set: {gama: 2}}}")
    with pytest.raises(ValueError, match=r"experiment.variants.bad: \['gama'\]"):
        measure(cfg)


def test_the_ratio_standard_error_comes_from_paired_steps():
    """Two rules that differ by a constant on every step have no error; noise in the differences has."""
    from measurement.expected_acceptance import ExpectedAcceptance

    measured = ExpectedAcceptance(None, {}, per_step={"token": [0.0, 1.0, 2.0, 1.0], "same+": [0.5, 1.5, 2.5, 1.5],
                                                      "noisy": [1.0, 1.0, 2.0, 0.0]})
    assert measured.steps == 4 and measured.tokens_per_forward("token") == 2.0
    assert measured.ratio_standard_error("same+", "token") == 0.0
    # differences 1, 0, 0, -1: sample variance 2/3, s.e. of the mean sqrt(2/3 / 4), over 2 tokens per forward
    assert measured.ratio_standard_error("noisy", "token") == pytest.approx((2 / 3 / 4) ** 0.5 / 2)
    assert ExpectedAcceptance(None, {}, per_step={"token": [1.0]}).ratio_standard_error("token", "token") is None
