"""Every Hydra config composes and instantiates; experiments.run works end to end.

Options are discovered from the conf/ folder, so a new yaml file is covered without editing
this file. A new *group* is instantiated too; give it a type check in CHECKS. A method
(`proposer=`) takes its trained parts from a model family (`models=zoo`, the embedded zoo and the
default; `models=tiny`, random weights and token-id prompts; `models=toy`, experiments.check's vocabulary-3 toy):
every method is built with every family.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache, partial
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from engine.loop import generate
from experiments.check import check_exact, exact_setup
from experiments.check import run as run_check
from experiments.run import run
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from harness.real import exact_loop_law
from tests.composed import LEVEL_DRAFTERS, REPRESENTATIVES, composed

CONF = Path(__file__).resolve().parents[1] / "conf"
GROUPS = sorted(d.name for d in CONF.iterdir() if d.is_dir())
OPTIONS = [(group, f.stem) for group in GROUPS for f in sorted((CONF / group).glob("*.yaml"))]
PROPOSERS = [option for group, option in OPTIONS if group == "proposer"]
MODELS = [option for group, option in OPTIONS if group == "models"]
FAST = ["experiment.warmup=0", "experiment.repeats=1"]
TINY = ["models=tiny"]  # the zoo is the default


def load(*overrides: str, config_name: str = "config"):
    return composed(config_name, *overrides)


def check_proposer(factory, cfg) -> None:
    if factory is None:  # proposer=none: plain decoding
        return
    assert isinstance(factory, partial), "a proposer config builds a factory (_partial_: true)"
    proposer = factory()
    for role in ("prefill", "propose", "commit", "select"):
        assert callable(getattr(proposer, role, None)), f"{type(proposer).__name__} lacks {role}()"
    model = instantiate(cfg.target)
    # checks vocabulary, device, dtype
    proposer.prefill(encode_prompt(cfg.prompt, tokenizer_of(model)), HFTarget(model))


def check_losses(losses, cfg) -> bool:
    """A loss option is name -> loss; each scores a law against itself 0 (cross-entropy aside). Built as the
    trainers build them (_convert_ object: a dataclass left inside a config would turn back into one)."""
    losses = instantiate(cfg.loss, _convert_="object")
    p = torch.tensor([[0.6, 0.3, 0.1]]).log()
    values = {name: float(loss(p, p, torch.tensor([0]))) for name, loss in losses.items()}
    return len(losses) > 0 and all(v == pytest.approx(0, abs=1e-6) or name == "ce" for name, v in values.items())


CHECKS = {
    "target": lambda obj, cfg: isinstance(obj, torch.nn.Module) and not obj.training,
    # data: the source is what instantiates (data.source); the rest are the split's settings
    "data": lambda obj, cfg: callable(instantiate(cfg.data.source).documents) and 0 < obj["heldout_fraction"] < 1,
    "loss": check_losses,
    "sampling": lambda obj, cfg: isinstance(obj, SamplingConfig),
    "proposer": lambda obj, cfg: check_proposer(obj, cfg) is None,
    # An experiment option holds one entry point's settings (run: repeats; check: checks; compare: methods).
    "experiment": lambda obj, cfg: isinstance(obj, Mapping) and len(obj) > 0 and obj.get("repeats", 1) >= 1,
    # A training option holds what experiments.train trains: its job (the trainer) and that job's settings.
    "training": lambda obj, cfg: isinstance(obj, Mapping) and callable(obj["job"]),
}


def test_options_found():
    assert {"target", "proposer", "sampling", "experiment", "training", "models"} <= set(GROUPS)
    assert {"none", "draft", "draft_tree", "self_draft", "medusa", "eagle", "eagle2", "eagle3", "rest",
            "mix"} <= set(PROPOSERS)
    assert {"zoo_target", "zoo_draft", "tiny_llama"} <= {o for g, o in OPTIONS if g == "target"}
    assert set(MODELS) == {"zoo", "tiny", "toy"}


def test_defaults_are_the_embedded_zoo():
    cfg = load()
    model = instantiate(cfg.target)
    assert model.config.num_hidden_layers == 20 and tokenizer_of(model) is not None
    assert instantiate(cfg.proposer)().lm.model.config.num_hidden_layers == 1


def test_target_path_takes_any_local_checkpoint(tmp_path):
    """target.path: an absolute folder works unchanged; a missing one is a clear error."""
    instantiate(load().target).save_pretrained(tmp_path / "copy")
    moved = instantiate(load(f"target.path={tmp_path / 'copy'}").target)
    assert moved.config.name_or_path == str(tmp_path / "copy")
    with pytest.raises(Exception, match="no Hugging Face checkpoint"):  # hydra wraps the ValueError
        instantiate(load(f"target.path={tmp_path / 'missing'}").target)


ALONE = [(g, o) for g, o in OPTIONS if g not in ("proposer", "models")]


@pytest.mark.parametrize("group, option", ALONE, ids=[f"{g}={o}" for g, o in ALONE])
def test_config_instantiates(group, option):
    # a chat source names its file on the command line (no default could exist on every machine)
    needs_path = group == "data" and OmegaConf.is_missing(load(f"{group}={option}").data.source, "path")
    cfg = load(f"{group}={option}", *(["data.source.path=chats.jsonl"] if needs_path else []))
    obj = instantiate(cfg.get(group))
    if group in CHECKS:
        assert CHECKS[group](obj, cfg), f"{group}={option} built {type(obj).__name__}"


# The zoo's REST datastore (rest, and the mixes that hold it) is the zoo corpus's suffix array: ~7 s to load each
# (built once, ~15 s): -m slow. The random families (tiny, toy) build one method of each way of reading the target
# by default (every method decodes on them in the proposer contract's tests), every method under -m slow.
BUILDS = [pytest.param(p, m, marks=pytest.mark.slow) if (m == "zoo" and p in ("rest", "mix", "mix_draft"))
          or (m != "zoo" and p not in REPRESENTATIVES) else (p, m) for p in PROPOSERS for m in MODELS]
SELF_SPEC = ("early_exit", "layer_skip")  # they draft with part of the target: the 1-layer toy has none to spare


@pytest.mark.parametrize("proposer, models", BUILDS)
def test_every_method_builds_with_every_model_family(proposer, models):
    """proposer x models: the method's parts come from the family and fit its target (checked at prefill)."""
    two_layers = ["target.num_layers=2"] if models == "toy" and proposer in SELF_SPEC else []
    cfg = load(f"models={models}", f"proposer={proposer}", *two_layers)
    assert CHECKS["proposer"](instantiate(cfg.proposer), cfg)


@pytest.mark.parametrize("proposer", SELF_SPEC)
def test_self_speculation_on_the_one_layer_toy_is_named(proposer):
    cfg = load("models=toy", f"proposer={proposer}")
    with pytest.raises(ValueError, match="self-speculation needs 2 layers"):
        check_proposer(instantiate(cfg.proposer), cfg)


def models_keys_read() -> tuple[set[str], set[str]]:
    """The models.* keys the conf/proposer configs interpolate: (required, read through oc.select with a default)."""
    text = "\n".join(path.read_text() for path in (CONF / "proposer").glob("*.yaml"))
    return set(re.findall(r"\$\{models\.([\w.]+)\}", text)), set(re.findall(r"\$\{oc\.select:models\.([\w.]+),", text))


@pytest.mark.parametrize("family", MODELS)
def test_every_family_gives_every_part_the_methods_read(family):
    """zoo, tiny and toy: one shape, every models.* key a proposer config reads (none is lacking; an oc.select one
    may be: tiny and toy leave models.mtp.budget to its default), so any method composes with any family."""
    required, optional = models_keys_read()
    assert {"draft", "cross_draft.model", "medusa.heads", "eagle.head", "mtp.chain_depth", "datastore"} <= required
    assert optional == {"mtp.budget"}
    cfg, absent = load(f"models={family}"), object()
    lacking = sorted(key for key in required if OmegaConf.select(cfg, f"models.{key}", default=absent) is absent)
    assert lacking == [], f"models={family} lacks {lacking}"


def test_a_target_folder_without_mtp_modules_is_named():
    """models.mtp.modules.path=${target.path}: the zoo target ships no MTP module, said as the config loads the
    modules, before any forward."""
    cfg = load("models=zoo", "proposer=mtp", "models.mtp.modules.path=${target.path}")
    with pytest.raises(InstantiationException, match="holds no MTP module"):
        instantiate(cfg.proposer)


def test_the_family_sets_the_target_and_the_prompt_and_the_command_line_still_wins():
    tiny = load("models=tiny")
    assert tiny.target.arch == "llama" and list(tiny.prompt) == [1, 2, 3, 4, 5]
    other = load("models=tiny", "target=tiny_qwen2", "prompt=[9,9]")
    assert other.target.arch == "qwen2" and list(other.prompt) == [9, 9]
    assert isinstance(load().prompt, str) and load().target.path == "target"


# Every method runs end to end on models=tiny (by default plain decoding and one method of each way of reading the
# target: the run's wiring is the same for all; the proposer contract decodes each); on the zoo the default run
# keeps one method for experiments.run's text and result.json (test_check_exact_and_greedy decodes others
# there), the rest -m slow.
RUN_END_TO_END = [(p, "tiny") if p in REPRESENTATIVES or p == "none"
                  else pytest.param(p, "tiny", marks=pytest.mark.slow) for p in PROPOSERS] + [
    (p, "zoo") if p == "draft" else pytest.param(p, "zoo", marks=pytest.mark.slow) for p in PROPOSERS if p != "none"]


@pytest.mark.parametrize("proposer, models", RUN_END_TO_END)
def test_run_end_to_end(proposer, models, tmp_path):
    cfg = load(f"models={models}", f"proposer={proposer}", "max_new_tokens=8", f"output_dir={tmp_path}", *FAST)
    result = run(cfg)
    assert len(result["tokens"]) == len(result["plain_tokens"]) == 8
    vocab_size = instantiate(cfg.target).config.vocab_size  # once, not per token (a zoo load is ~0.2 s)
    assert all(0 <= t < vocab_size for t in result["tokens"])
    assert (result["text"] is None) == (models == "tiny")  # the zoo decodes to text
    assert result["stats"]["tokens_per_forward"] >= 1
    assert result["stats"]["steps"] >= 1 and result["speedup"] > 0
    written = json.loads((tmp_path / "result.json").read_text())
    assert written["tokens"] == result["tokens"]
    assert (written["config"]["proposer"] is None) == (proposer == "none")
    assert written["config"]["max_new_tokens"] == 8


@pytest.mark.parametrize("family", ["tiny", "zoo"])
def test_greedy_matches_plain_decoding(family, tmp_path):
    models = [f"models={family}", "proposer=draft"]
    plain = run(load(*models, "proposer=none", "sampling=greedy", "max_new_tokens=16",
                     f"output_dir={tmp_path / 'plain'}", *FAST))
    spec = run(load(*models, "sampling=greedy", "max_new_tokens=16", f"output_dir={tmp_path / 'spec'}", *FAST))
    assert spec["tokens"] == spec["plain_tokens"] == plain["tokens"]
    assert len(plain["tokens"]) == 16 and spec["text"] == plain["text"]


# Every method on models=tiny is tests/proposers/test_proposer_contract.py's (exact law, greedy identity, rows,
# bad settings). Here the zoo: experiments.check end to end with its trained parts: greedy identity for
# four families by default, and EAGLE-2's exact law with its `auto` settings read from the toy head's search
# (the exact check builds the method on models=toy); every method, both checks, under -m slow.
ZOO_DEFAULT = {"draft": "[greedy]", "draft_tree": "[greedy]", "medusa": "[greedy]", "eagle2": "[exact,greedy]"}


@pytest.mark.parametrize("proposer, checks", ZOO_DEFAULT.items())
def test_check_exact_and_greedy(proposer, checks, tmp_path):
    """experiments.check end to end (its exact and greedy checks; the statistical one is minutes), quick:
    one greedy prompt, a chain no longer than the exact depth."""
    check_end_to_end(proposer, "zoo", checks, tmp_path, quick=True)


@pytest.mark.slow
@pytest.mark.parametrize("proposer", PROPOSERS)
def test_check_exact_and_greedy_full(proposer, tmp_path):
    check_end_to_end(proposer, "zoo", "[exact,greedy]", tmp_path, quick=False)


@cache
def proposer_node(name: str, models: str):
    """The proposer node of `name` with a model family, composed once (a compose is ~0.3 s)."""
    return load(f"models={models}", f"proposer={name}").proposer


@cache
def check_exact_settings():
    return load(config_name="check").experiment.exact


def check_end_to_end(proposer: str, models: str, checks: str, tmp_path: Path, quick: bool) -> None:
    small_tree = ["proposer.depth=1"] if proposer.endswith("_tree") else []  # enumeration is exponential
    # tests/harness has them
    one_sampling = ["~experiment.exact.samplings.t07_topk2", "~experiment.exact.samplings.penalty15"]
    # Quick: the longest of the check's prompts (a repeat, token 0), and a chain cut to the exact depth:
    # draws past the first `depth` tokens are never read by their law, they only multiply the enumeration.
    if quick:
        node, depth = proposer_node(proposer, models), check_exact_settings().depth
        chain = node is not None and node.get("_target_") in LEVEL_DRAFTERS and not small_tree
        short_chain = [f"proposer.depth={depth}"] if chain and node.depth > depth else []
        # The draft's confidence cut couples the rows, so its worlds run one at a time (~80 s here):
        # tests/harness/test_configured_proposers checks it exactly; -m slow runs it here.
        if node is not None and node.get("stop_below", 0):
            short_chain += ["proposer.stop_below=0"]
        quick_settings = ["experiment.greedy.prompts=[[40,3,9,1,0,22,5,5]]", "experiment.greedy.max_new_tokens=8",
                          *short_chain]
    else:
        quick_settings = ["experiment.greedy.max_new_tokens=16"]
    cfg = load(f"models={models}", f"proposer={proposer}", f"experiment.checks={checks}",
               "experiment.greedy.dtypes=[float64]", f"output_dir={tmp_path}", *small_tree, *one_sampling,
               *quick_settings, config_name="check")
    rows = run_check(cfg)
    assert {r["check"] for r in rows} == set(checks.strip("[]").split(",")) and all(r["passed"] for r in rows), rows
    assert json.loads((tmp_path / "check.json").read_text()) == rows


VERIFIERS = [f.stem for f in sorted((CONF / "verifier").glob("*.yaml"))]


@pytest.mark.parametrize("proposer", ["draft", "draft_tree"])
@pytest.mark.parametrize("verifier", VERIFIERS)
def test_every_verifier_runs_and_says_whether_it_is_lossless(verifier, proposer, tmp_path):
    """verifier=... reaches generate, on a chain and on a tree: the run reports what the rule says of itself (the
    lossy ones are shown failing in tests/verifiers/test_verifier_contract.py), a lossless rule keeps greedy text;
    sampled decoding runs too (empty trees and all)."""
    models = [*TINY, f"proposer={proposer}", f"verifier={verifier}", "max_new_tokens=12", *FAST]
    cfg = load(*models, "sampling=greedy", f"output_dir={tmp_path / 'greedy'}")
    lossless = instantiate(cfg.verifier).lossless  # the rule as configured (the sampling is no part of it)
    greedy = run(cfg)
    assert greedy["lossless"] is lossless
    if verifier in ("token", "typical"):  # known answers: the reference rule and the lossy baseline
        assert greedy["lossless"] is (verifier == "token")
    if greedy["lossless"]:
        assert greedy["tokens"] == greedy["plain_tokens"]
    sampled = run(load(*models, "sampling=t1", f"output_dir={tmp_path / 't1'}"))
    assert len(sampled["tokens"]) == 12


def test_the_check_runs_the_configured_verifier(tmp_path):
    """experiments.check with verifier=typical fails its exact rows: the lossy rule reaches the harness."""
    quick = ["proposer.depth=2", "proposer.stop_below=0", "experiment.exact.depth=2",
             "~experiment.exact.samplings.t07_topk2", "~experiment.exact.samplings.penalty15", f"output_dir={tmp_path}"]
    rows = check_exact(load(*TINY, "verifier=typical", *quick, config_name="check"))
    assert rows and not any(row["passed"] for row in rows)
    rows = check_exact(load(*TINY, "verifier=block", *quick, config_name="check"))
    assert rows and all(row["passed"] for row in rows)


# What the exact check swapped in by constructor-argument name before its toy became models=toy (the former
# experiment.exact.target and .parts of conf/experiment/check.yaml), for two methods.
OLD_TOY_TARGET = {"_target_": "framework.lm.models.tiny_random_model", "arch": "llama", "vocab_size": 3,
                  "hidden_size": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1, "dtype": "float64",
                  "init_std": 0.3, "seed": 0}
OLD_TOY_PARTS = {
    "medusa": {"heads": {"_target_": "proposers.medusa.heads.random_heads", "hidden_size": 16, "vocab_size": 3,
                         "num_heads": 2, "seed": 0, "dtype": "float64"}, "choices": [[0], [1], [0, 0]]},
    "eagle2": {"head": {"_target_": "proposers.eagle.head.random_head", "hidden_size": 16, "vocab_size": 3,
                        "target_num_layers": 1, "architecture": "eagle3", "target_layers": [0, 1],
                        "draft_vocab_size": 2, "seed": 0, "scale": 2.0, "dtype": "float64", "pard_token": 0,
                        "searched": {"choices": [[0], [1], [0, 0]], "top_k": 2, "depth": 2, "budget": 3}}},
}


@pytest.mark.parametrize("proposer", sorted(OLD_TOY_PARTS))
def test_the_exact_check_on_models_toy_builds_what_the_swap_built(proposer, tmp_path):
    """The check builds the configured method on models=toy: the same target, and a proposer that decodes as the one
    the former swap by argument name built (the same sampled tokens and acceptances), so its exact law is the same."""
    cfg = load(*TINY, f"proposer={proposer}", f"output_dir={tmp_path}", config_name="check")
    target, factory, _ = exact_setup(cfg)
    old_target = instantiate(OLD_TOY_TARGET)
    old_parts = {name: instantiate(node) for name, node in OLD_TOY_PARTS[proposer].items()}
    old_factory = partial(instantiate(cfg.proposer), **old_parts)
    assert all(torch.equal(a, b) for a, b in zip(target.state_dict().values(), old_target.state_dict().values()))

    def decoded(model, make):
        out = generate(HFTarget(model), make(), [[1, 2, 0]] * 4, 12, SamplingConfig(temperature=0.7), seed=0)
        return out.tokens.tolist(), [step.accepted.tolist() for step in out.stats.steps]

    assert decoded(target, factory) == decoded(old_target, old_factory)
    t07 = instantiate(cfg.experiment.exact.samplings.t07_topk2)
    law = exact_loop_law(target, factory, torch.tensor([[1, 2, 0]]), 3, t07)
    assert law == pytest.approx(exact_loop_law(old_target, old_factory, torch.tensor([[1, 2, 0]]), 3, t07), abs=1e-12)
    assert all(row["passed"] for row in check_exact(cfg))


@pytest.mark.parametrize("proposer", ["draft", "eagle3", "medusa"])
def test_tiny_parts_on_the_zoo_target_say_what_to_pair(proposer):
    """They read target.vocab_size and the like, which the zoo target does not state: an interpolation error
    named no pairing; the builder says which sizes are missing and what goes with what."""
    with pytest.raises(Exception, match="not given: the parts of models=tiny read the sizes of a tiny_\\* target"):
        instantiate(load("models=tiny", "target=zoo_target", f"proposer={proposer}").proposer)


def test_the_main_demo_is_greedy_identical_then_one_sampled_line(tmp_path):
    """experiments.run's default: greedy, the report says the speculative text is plain decoding's, then one
    continuation sampled under experiment.sampled, labelled as sampled."""
    from experiments.run import report

    cfg = load("models=tiny", "max_new_tokens=8", f"output_dir={tmp_path}", *FAST)
    assert cfg.sampling.temperature == 0 and cfg.experiment.sampled == "t1"
    result = run(cfg)
    assert result["tokens"] == result["plain_tokens"] and len(result["sampled"]["tokens"]) == 8
    assert result["sampled"]["temperature"] == 1.0
    text = report({**result, "choices": {}})
    assert "identical to plain decoding: yes" in text and "sampled, speculative at T = 1.0" in text
    broken = report({**result, "choices": {},
                     "tokens": result["tokens"][::-1] if len(set(result["tokens"])) > 1 else [-1]})
    assert "identical to plain decoding: NO" in broken
    alone = {k: v for k, v in result.items() if k != "sampled"}  # experiment.sampled=null: no sampled line
    assert "sampled, speculative" not in report({**alone, "choices": {}})


def test_a_second_run_in_the_same_folder_is_refused_and_the_first_result_stays(tmp_path):
    """Two runs given the same explicit folder: the second is refused before any work, naming the result it would
    replace; while a run holds the folder, another is refused too (issue 58, case 2)."""
    from framework.core import files

    cfg = load("models=tiny", "proposer=prompt_lookup", "max_new_tokens=4", f"output_dir={tmp_path}", *FAST)
    first = run(cfg)
    with pytest.raises(files.FolderBusy, match="holds an earlier run's result"):
        run(cfg)
    assert json.loads((tmp_path / "result.json").read_text())["tokens"] == first["tokens"]
    busy = tmp_path / "busy"
    with files.exclusive(busy, "experiments.run"):
        with pytest.raises(files.FolderBusy, match="in use by another"):
            run(load("models=tiny", "proposer=prompt_lookup", "max_new_tokens=4", f"output_dir={busy}", *FAST))
    assert not (busy / "result.json").exists()
