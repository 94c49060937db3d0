"""The proposer contract, run over every method in conf/proposer with models=tiny.

1. Exact: the law of the first tokens the real loop emits equals the target's, on experiments.check's
   vocabulary-3 toy: the method built on models=toy (its parts sized for that target).
2. Greedy identity: greedy speculative decoding emits plain greedy decoding's tokens (float64).
3. Rows are independent: a batch of prompts of different lengths decodes as each prompt would alone.
4. Bad settings are named: a ValueError that names the setting, before any decoding.

An exact Setting is a method, overrides for what its config does not name (Medusa's iid and wor
children), and one sampling of the check, with a `tier`: the default run takes "default", -m slow
takes every setting, as configured (the default tier cuts chains to the law's depth and drops the
confidence cut, which only multiply the enumeration, and checks the method's own law, policy=fixed; the laws under
the sizing policies follow in their own test). A new conf/proposer file joins 1-3 by itself;
4 fails until BAD_SETTINGS names a bad setting of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from engine.loop import DecodeOptions, generate
from engine.scheduler import Request, Scheduler
from experiments.check import check_exact, check_greedy, check_ragged
from framework.control.adaptive import AdaptiveDepth
from framework.control.goodput import GoodputPolicy
from framework.core.policy import FixedPolicy, Plan
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from harness.ragged import TakingTurns
from tests.composed import LEVEL_DRAFTERS, REPRESENTATIVES, composed

CONF = Path(__file__).resolve().parents[2] / "conf"
PROPOSERS = sorted(p.stem for p in (CONF / "proposer").glob("*.yaml"))
SAMPLINGS = ("t1", "t07_topk2", "penalty15")  # experiment.exact.samplings


def load(*overrides: str, config_name: str = "check"):
    return composed(config_name, "models=tiny", *overrides)


def alone(cfg, prompt: list[int], budget: int) -> list[int]:
    """Plain greedy decoding of one prompt on cfg's target: the reference the rows tests compare against."""
    return list(_alone(OmegaConf.to_yaml(cfg.target, resolve=True), tuple(prompt), budget))


@cache
def _alone(target: str, prompt: tuple[int, ...], budget: int) -> tuple[int, ...]:
    """Once per target config, prompt and budget (many methods share one target): a target config builds the same
    model every time (tiny_random_model is seeded), so its plain decoding is the same too."""
    model = instantiate(OmegaConf.create(target))
    decoded = generate(HFTarget(model), None, [list(prompt)], budget, SamplingConfig(temperature=0)).tokens[0]
    return tuple(decoded.tolist())


@dataclass(frozen=True)
class Setting:
    proposer: str
    sampling: str = "t1"
    overrides: tuple[str, ...] = ()
    tier: str = "default"

    @property
    def id(self) -> str:
        return "-".join([self.proposer, *(o.split(".")[-1] for o in self.overrides), self.sampling])


# The default tier: every method at T = 1, and the spread each family's own grid kept by default
# (Medusa's three kinds; sampled EAGLE trees under top-k and the penalty). self_draft is draft with another
# model and mix is mix_draft with an EAGLE-2 part; without a grammar, grammar drafts nothing and mix_grammar is
# the draft model's chain (their exact laws under grammars: tests/constraints); the *_chain configs are draft, prompt
# lookup and EAGLE-3 at the settings vLLM runs: their exact check repeats another's, so -m slow.
DEFAULT = {("medusa", "t1", ("proposer.kind=wor",)), ("medusa", "t07_topk2", ()), ("eagle", "t07_topk2", ()),
           ("eagle2", "penalty15", ())}  # Medusa's i.i.d. children (ten seconds a sampling) under -m slow: the draft
# model's chain is i.i.d. at T = 1 by default
REPEATS = {"self_draft", "mix", "grammar", "mix_grammar", "draft_chain", "prompt_lookup_chain", "eagle3_chain"}
VARIANTS = {"medusa": [(), ("proposer.kind=iid",), ("proposer.kind=wor",)]}
# Self-speculation drafts with part of the target: its toy target gets a second layer (a 1-layer one has no part).
OWN_TARGET = {p: ("models=toy", "target.num_layers=2") for p in ("early_exit", "layer_skip")}
SETTINGS = [Setting(p, s, o,
                    "default" if (s == "t1" and not o and p not in REPEATS) or (p, s, o) in DEFAULT else "slow")
            for p in PROPOSERS for o in VARIANTS.get(p, [()]) for s in SAMPLINGS]


@cache
def exact_depth() -> int:
    return load().experiment.exact.depth


@cache
def configured(proposer: str):
    return load(f"proposer={proposer}").proposer


def shrunk(proposer: str, depth: int) -> list[str]:
    """Overrides that keep the default tier's enumeration small: a chain cut to the law's depth, no
    confidence cut (it couples the rows: worlds run one at a time; the harness's
    configured-proposer tests check them exactly), one level of a tree."""
    node = configured(proposer)
    if node is None:
        return []
    chain = node.get("_target_") in LEVEL_DRAFTERS and not proposer.endswith("_tree")
    out = [f"proposer.depth={depth}"] if chain and node.depth > depth else []
    out += ["proposer.stop_below=0"] if node.get("stop_below", 0) else []
    # A mix runs its worlds one at a time (one merged shape for the rows): a drafting part's own coins would multiply
    # them, so its draft model drafts its top-ranked chain (kind point), cut likewise.
    for name, part in (node.get("parts") or {}).items():
        if part.get("_target_") in LEVEL_DRAFTERS:
            out += [f"proposer.parts.{name}.{setting}" for setting in (
                f"depth={min(depth, part.depth)}", "kind=point", "stop_below=0")]
    return out + (["proposer.depth=1"] if proposer.endswith("_tree") else [])


@pytest.mark.parametrize("setting", [pytest.param(s, id=s.id, marks=() if s.tier == "default" else pytest.mark.slow)
                                     for s in SETTINGS])
def test_the_loop_law_is_the_targets(setting, tmp_path):
    """The default tier checks the method's own law (policy=fixed: speculation as configured, the worlds side by side
    in one batch where the method's rows are independent); the law under the sizing policies is the next test's (by
    default for a method of each kind). -m slow checks each setting as configured, under the default policy."""
    others = [f"~experiment.exact.samplings.{s}" for s in SAMPLINGS if s != setting.sampling]
    small = shrunk(setting.proposer, exact_depth()) if setting.tier == "default" else \
        (["proposer.depth=1"] if setting.proposer.endswith("_tree") else [])  # a wider tree's enumeration is hours
    cfg = load(f"proposer={setting.proposer}", *setting.overrides, *OWN_TARGET.get(setting.proposer, ()), *others,
               *small, f"output_dir={tmp_path}")
    if setting.tier == "default":
        cfg.policy = None  # policy=fixed (conf/policy/fixed.yaml sets just this): the groups' compose the other tests
        # of the method use serves (a compose is ~0.1 s); tests/test_composed.py holds the two equal
    rows = check_exact(cfg)
    assert [r["setting"] for r in rows] == [setting.sampling] and rows[0]["passed"], rows


# Under the goodput policy by default: one method of each kind of tree the policy trims or sizes (point trees of
# heads -- a static one, a dynamic one, MTP's -- a text match, side rows, a parallel drafter); every other method
# under -m slow (the draft model's chain takes half a minute, its tree, self-speculation and the cross-vocabulary
# draft 2-3 s each).
GOODPUT_DEFAULT = {"medusa", "eagle2", "eagle3", "mtp", "prompt_lookup", "lookahead", "dflash"}


# Under the depth schedule by default: a draft model's chain and a text match (the schedule caps any proposer's plan)
ADAPTIVE_DEFAULT = {"draft_chain", "prompt_lookup"}


@pytest.mark.parametrize("policy, proposer", [
    pytest.param(policy, p, id=f"{p}-{policy}", marks=() if p in default else pytest.mark.slow)
    for policy, default in (("goodput", GOODPUT_DEFAULT), ("adaptive", ADAPTIVE_DEFAULT))
    for p in PROPOSERS if p not in REPEATS])
def test_the_loop_law_is_the_targets_under_a_sizing_policy(policy, proposer, tmp_path):
    """Every method with its steps planned and trimmed by the goodput policy (given costs: a clock would decide
    differently in each replay of a world), and with its depth scheduled by the acceptance before (adaptive), at
    T = 1. Each policy sizes one tree for the batch, so worlds run one at a time: the draft model's chain under
    goodput takes half a minute (-m slow; tests/harness/test_policy_exact.py has a shorter one)."""
    others = [f"~experiment.exact.samplings.{s}" for s in SAMPLINGS if s != "t1"]
    rows = check_exact(load(f"proposer={proposer}", f"policy={policy}", *others, *shrunk(proposer, exact_depth()),
                            *OWN_TARGET.get(proposer, ()),
                            f"output_dir={tmp_path}"))
    assert [r["setting"] for r in rows] == ["t1"] and rows[0]["passed"], rows


@pytest.mark.parametrize("proposer", PROPOSERS)
def test_greedy_is_plain_greedy(proposer, tmp_path):
    rows = check_greedy(load(f"proposer={proposer}", "experiment.greedy.dtypes=[float64]",
                             "experiment.greedy.prompts=[[40,3,9,1,0,22,5,5]]", "experiment.greedy.max_new_tokens=12"))
    assert rows and all(r["passed"] for r in rows), rows


@pytest.mark.slow
@pytest.mark.parametrize("proposer", PROPOSERS)
def test_greedy_is_plain_greedy_on_the_checks_prompts(proposer):
    rows = check_greedy(load(f"proposer={proposer}"))
    assert len(rows) == 6 and all(r["passed"] for r in rows), rows  # 3 prompts x float32 and float64


# Rows of different lengths (20, 2 and 5 tokens: 10x apart): each row keeps its own positions and context.
PROMPTS = [[4, 9, 2, 7, 40, 3, 9, 1, 0, 22, 5, 5, 17, 8, 31, 2, 6, 12, 9, 4], [7, 7], [30, 2, 11, 5, 6]]


def rows_settings():
    """Every method but none; configs that repeat another's at other settings (REPEATS) only under -m slow."""
    return [pytest.param(p, marks=pytest.mark.slow if p in REPEATS else ()) for p in PROPOSERS if p != "none"]


@pytest.mark.parametrize("proposer", rows_settings())
def test_rows_of_a_batch_decode_as_each_alone(proposer):
    """Greedy: each row of a batch of three prompts of different lengths emits what that prompt alone emits with plain
    decoding, whatever the method shares between rows (a tree shape, a depth schedule, a datastore).
    24 tokens: long enough that rows accept different counts in some step, so a commit that kept one
    row's path for every row fails here for every method but self_draft (whose rows all accept all)."""
    cfg = load(f"proposer={proposer}", "target.dtype=float64", config_name="config")
    model, make, greedy = instantiate(cfg.target), instantiate(cfg.proposer), SamplingConfig(temperature=0)
    batch = generate(HFTarget(model), make(), PROMPTS, 24, greedy).tokens
    for row in range(len(PROMPTS)):
        assert batch[row].tolist() == alone(cfg, PROMPTS[row], 24), (proposer, row)


# 32 requests, prompts of 3 to 30 tokens (10x apart), for the goal: any row = alone at batch sizes up to 32.
MANY = [[(7 * row + 3 * i) % 60 + 1 for i in range(3 + (27 * row) // 31)] for row in range(32)]


def many_alone(cfg) -> list[list[int]]:
    return [alone(cfg, prompt, 12) for prompt in MANY]


@pytest.mark.slow
@pytest.mark.parametrize("proposer", [p for p in PROPOSERS if p != "none"])
def test_32_rows_10x_apart_decode_as_alone(proposer):
    """Greedy: one batch of all 32, and the scheduler serving them 32 at a time (and 8 at a time, so they join)."""
    cfg = load(f"proposer={proposer}", "target.dtype=float64", config_name="config")
    model, make, greedy = instantiate(cfg.target), instantiate(cfg.proposer), SamplingConfig(temperature=0)
    assert generate(HFTarget(model), make(), MANY, 12, greedy).tokens.tolist() == many_alone(cfg), proposer
    done = Scheduler(model, make, greedy, max_batch=8).run([Request(p, 12) for p in MANY])
    assert [f.tokens for f in done] == many_alone(cfg), proposer


class Scripted(FixedPolicy):
    """Plans from a script (0: a plain step): every proposer keeps its books across steps it does not draft."""

    def __init__(self, depths=(0, 2, 0, 0, 1, 3, 0, 1, 1, 0)):
        self.depths, self.step = depths, 0

    def plan(self) -> Plan:
        self.step += 1
        return Plan(self.depths[(self.step - 1) % len(self.depths)])


@pytest.mark.parametrize("policy, proposer", [
    # every method with plain steps between drafting ones; the goodput policy and rows taking turns (a packed
    # forward) for one method of each way of reading the target by default, every method under -m slow
    pytest.param(policy, p, id=f"{p}-{policy.__name__}",
                 marks=pytest.mark.slow if p in REPEATS or (policy is not Scripted and p not in REPRESENTATIVES)
                 else ())
    for policy in (Scripted, GoodputPolicy, AdaptiveDepth, TakingTurns) for p in PROPOSERS if p != "none"])
def test_rows_decode_as_each_alone_under_a_policy(proposer, policy):
    """Greedy, three rows: with plain steps between drafting ones (the script), with the goodput
    policy's plans and trims (its costs measured on this machine), under the depth schedule, and with rows taking
    turns to draft (a packed forward: the others' roots alone), each row emits plain greedy decoding's tokens."""
    cfg = load(f"proposer={proposer}", "target.dtype=float64", config_name="config")
    model, make, greedy = instantiate(cfg.target), instantiate(cfg.proposer), SamplingConfig(temperature=0)
    batch = generate(HFTarget(model), make(), PROMPTS, 24, greedy, options=DecodeOptions(policy=policy())).tokens
    for row in range(len(PROMPTS)):
        assert batch[row].tolist() == alone(cfg, PROMPTS[row], 24), (proposer, row)


# The joint law of a batch of prompts of different lengths, and of requests the scheduler admits as others end,
# enumerates worlds of every row (the product of one row's): the methods that draw few coins run by default, the
# rest under -m slow (the draft model's i.i.d. chains take two minutes). The law by default for one of each kind
# (plain and a head's tree reading the target's features: 2-5 s each); greedy joins for all of RAGGED_DEFAULT.
RAGGED_DEFAULT = {"none", "string_match", "prompt_lookup", "eagle", "medusa", "dflash", "pard"}
RAGGED_LAW_DEFAULT = {"none", "eagle"}


@pytest.mark.parametrize("proposer", [pytest.param(p, marks=() if p in RAGGED_LAW_DEFAULT else pytest.mark.slow)
                                      for p in PROPOSERS if p not in REPEATS])
def test_rows_of_different_lengths_decode_as_alone_in_law(proposer, tmp_path):
    """Exact: prompts of 7 tokens and 1 in one batch, and three requests through the scheduler two at a time, an EOS
    ending rows at different steps; the joint law of their tokens is the product of each prompt's own law
    (experiment.ragged)."""
    rows = check_ragged(load(f"proposer={proposer}", *shrunk(proposer, 2), *OWN_TARGET.get(proposer, ()),
                             f"output_dir={tmp_path}"))
    assert rows and all(r["passed"] for r in rows), rows


# Requests of different lengths and budgets, admitted two at a time as others end.
REQUESTS = [(PROMPTS[0], 20), (PROMPTS[1], 7), (PROMPTS[2], 15), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 11), ([3], 25)]


def plain_alone(cfg) -> list[list[int]]:
    return [alone(cfg, prompt, budget) for prompt, budget in REQUESTS]


@pytest.mark.parametrize("proposer, policy", [  # every method by default (each under a second); with plain steps too
    pytest.param(p, policy, marks=() if policy is None or p in RAGGED_DEFAULT | {"draft"} else pytest.mark.slow)
    for p in PROPOSERS if p != "none" for policy in (None, Scripted)])
def test_requests_admitted_as_others_end_decode_as_alone(proposer, policy):
    """Greedy, continuous batching (engine/scheduler.py): five requests, two at a time, each admitted (prefilled
    apart with a fresh proposer, then joined) when another ends; with plain steps between drafting ones (Scripted),
    joins find waiting state (feature backlogs, deferred tokens). Each request emits what it emits alone."""
    cfg = load(f"proposer={proposer}", "target.dtype=float64", config_name="config")
    model, make, greedy = instantiate(cfg.target), instantiate(cfg.proposer), SamplingConfig(temperature=0)
    runner = Scheduler(model, make, greedy, max_batch=2, policy=policy() if policy else None)
    done = runner.run([Request(prompt, budget) for prompt, budget in REQUESTS])
    assert [f.tokens for f in done] == plain_alone(cfg), proposer
    assert max(step.decoding for step in runner.steps) == 2 and sum(step.admitted for step in runner.steps) == 5
    assert any(0 < step.admitted < step.decoding for step in runner.steps)  # a newcomer joined a running request


BAD_SETTINGS = {  # proposer -> (a bad setting, what its error says)
    "draft": ("proposer.depth=0", "depth >= 1"),
    "draft_tree": ("proposer.branching=0", "branching >= 1"),
    "self_draft": ("proposer.kind=sorted", "kind must be"),
    "medusa": ("proposer.kind=greedy", "kind must be"),
    "eagle": ("proposer.choices=[[0],[0,0,0]]", "has no parent choice"),
    "eagle2": ("proposer.top_k=0", "top_k, depth and budget >= 1"),
    "eagle3": ("proposer.budget=0", "top_k, depth and budget >= 1"),
    "rest": ("proposer.budget=0", "budget must be >= 1"),
    "mix": ("proposer.budget=0", "budget must be >= 1"),
    "mix_draft": ("proposer.weights=[1]", "weights must be one positive number per part"),
    "prompt_lookup": ("proposer.min_ngram=0", "min_ngram must be >= 1"),
    "lookahead": ("proposer.window=0", r"window \(W\) must be >= 1"),
    "dflash": ("proposer.depth=9", r"depth must lie in 1..3"),
    "pard": ("proposer.depth=0", "depth must be >= 1"),
    "peagle": ("proposer.kind=typical", "kind must be"),
    "mtp": ("proposer.depth=0", "depth and budget >= 1"),
    "grammar": ("proposer.depth=0", "depth must be >= 1"),
    "mix_grammar": ("proposer.budget=0", "budget must be >= 1"),
    "cross_vocab": ("proposer.depth=0", "depth >= 1"),
    "string_match": ("proposer.depth=0", "depth must be >= 1"),
    "draft_chain": ("proposer.depth=0", "depth >= 1"),
    "prompt_lookup_chain": ("proposer.max_matches=0", "max_matches must be >= 1"),
    "eagle3_chain": ("proposer.depth=0", "top_k, depth and budget >= 1"),
    "mtp_chain": ("models.mtp.chain_depth=0", "depth and budget >= 1"),
    "suffix": ("proposer.max_budget=0", "max_budget >= 1"),
    "early_exit": ("proposer.exit_layer=2", r"exit_layer 2 is outside 1\.\.1"),
    "layer_skip": ("proposer.skip=[0,5]", r"skip names layers \[5\] that this 2-layer target lacks"),
}


def test_every_method_has_a_bad_setting_to_show():
    assert set(BAD_SETTINGS) == set(PROPOSERS) - {"none"}


@pytest.mark.parametrize("proposer", sorted(BAD_SETTINGS))
def test_a_bad_setting_is_named(proposer):
    override, message = BAD_SETTINGS[proposer]
    cfg = load(f"proposer={proposer}", override, config_name="config")
    with pytest.raises(Exception) as raised:
        make = instantiate(cfg.proposer)
        make().prefill(torch.tensor([[1, 2, 3]]), HFTarget(instantiate(cfg.target)))
    error = raised.value
    while not isinstance(error, ValueError) and error.__cause__ is not None:  # hydra wraps what the builder raised
        error = error.__cause__
    assert isinstance(error, ValueError), repr(raised.value)
    assert re.search(message, str(error)), str(error)


def test_settings_cover_every_method_and_sampling():
    assert {s.proposer for s in SETTINGS} == set(PROPOSERS)
    assert {(s.proposer, s.sampling) for s in SETTINGS} == {(p, s) for p in PROPOSERS for s in SAMPLINGS}
    assert all(s.tier in ("default", "slow") for s in SETTINGS)
    assert DEFAULT <= {(s.proposer, s.sampling, s.overrides) for s in SETTINGS}  # no stale entry
