"""The axes of experiments.compare: the methods (conf/proposer configs, transformers' and the peer engines'
runners, the run's own proposer group), policies, samplings and batch sizes, every name checked before any work
(grid_of); proposer configs that cannot decode on the target are dropped (discovered) or refused (listed) by
probe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import product

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig

from engine.loop import generate
from framework.control.device_profile import DeviceProfile
from framework.core.sampling import SamplingConfig, hf_sampling
from framework.lm.target import HFTarget
from measurement.common import CONF, option, whole_number, without_grammar
from measurement.compare_report import FIXED, PREDICTION, PROJECTION
from measurement.methods import HF_METHODS, HF_PLD_DEFAULTS, transformers_mtp_refusal
from measurement.peers.rows import ARCTIC_ROW, missing_rows
from measurement.peers.rows import ROWS as PEER_ROWS
from measurement.throughput import THROUGHPUT_ROWS, concurrencies

# Rows that are not a conf/proposer config -> their runner (measurement.methods): plain decoding of ours and
# of transformers, transformers' assisted generation, its prompt lookup (at its defaults; matched: at our
# prompt lookup's settings), its MTP decoding and its early exit (assistant_early_exit). By default a run takes
# the speculative ones (hf_mtp where the target carries modules transformers reads).
RUNNERS = {"plain": "ours_plain", "hf_plain": "hf_plain", "hf_assisted": "hf_assisted", "hf_prompt_lookup": "hf_pld",
           "hf_pld_matched": "hf_pld_matched", "hf_mtp": "hf_mtp",
           "hf_early_exit": "hf_early_exit", ARCTIC_ROW: ARCTIC_ROW,
           **{row: row for row in PEER_ROWS}}  # vLLM's and arctic's: measurement.peers.rows
DISCOVERED = ("hf_assisted", "hf_prompt_lookup", "hf_mtp")  # hf_mtp: where transformers reads the target's MTP
BASELINES = ("plain", "hf_plain")  # experiment.baseline: the per-prompt reference of every speedup
UNDER_A_GRAMMAR = ("grammar", "mix_grammar")  # draft what a grammar forces: experiments.structured times them
OWN = "proposer"  # the method that is the run's own proposer group (e.g. -m proposer.depth=2,4)


def proposer_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")


def runner_of(method: str) -> str:
    return RUNNERS.get(method, f"ours_{method}")


def policy_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "policy").glob("*.yaml"))


def policy_factory(name: str, cfg: DictConfig) -> Callable | None:
    """conf/policy/<name> instantiated: a factory of policy objects, or None for the fixed policy (generate's
    default)."""
    factory = instantiate(option("policy", name, cfg, "experiment.policies"))
    if factory is not None and not callable(factory):
        raise ValueError(f"experiment.policies: conf/policy/{name}.yaml must build a factory (_partial_: true), "
                         f"got a {type(factory).__name__}")
    return factory


def nonempty_list(exp: DictConfig, key: str) -> list:
    value = exp[key]
    if not isinstance(value, (ListConfig, list)) or not value:
        raise ValueError(f"experiment.{key} must be a non-empty list, got {value!r}")
    return list(value)


def batch_sizes(exp: DictConfig) -> list[int]:
    sizes = nonempty_list(exp, "batch_sizes")
    wrong = [b for b in sizes if isinstance(b, bool) or not isinstance(b, int) or b < 1]
    if wrong or len(set(sizes)) < len(sizes):
        raise ValueError(f"experiment.batch_sizes must hold distinct integers >= 1, got {sizes}")
    return sizes


def sampling_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "sampling").glob("*.yaml"))


@dataclass
class Grid:
    methods: list[str]  # row names: proposer config names and RUNNERS keys
    proposers: dict[str, DictConfig]  # proposer config name -> its node
    samplings: dict[str, SamplingConfig]
    categories: list[str]
    skipped: dict[str, str]  # discovered proposer configs that do not run on the target -> why
    pld: dict[str, dict]  # transformers' prompt-lookup rows -> their num_tokens / max_ngram
    policies: dict[str, Callable | None]  # experiment.policies -> a factory of policy objects (None: fixed)
    batch_sizes: list[int]
    decide_by: DeviceProfile | None = None  # experiment.policy_profile: the costs cost-sized policies decide from

    def runs(self, method: str, policy: str, batch: int) -> bool:
        """A policy sizes a proposer's speculation: a proposer runs under each listed policy, rows without one (plain,
        transformers') under fixed only, whatever the list; transformers' runners decode one prompt at a time."""
        sized = policy in self.policies if method in self.proposers else policy == FIXED
        return sized and (batch == 1 or runner_of(method) not in HF_METHODS)

    @property
    def every_policy(self) -> list[str]:
        """The listed policies, and fixed where a row without a proposer runs under it unlisted."""
        unsized = any(m not in self.proposers for m in self.methods)
        return list(self.policies) + ([FIXED] if unsized and FIXED not in self.policies else [])

    def rows(self, batch: int) -> list[tuple[str, str]]:
        """The (method, policy) pairs timed at this batch size."""
        return [(m, p) for m in self.methods for p in self.every_policy if self.runs(m, p, batch)]


def grid_of(cfg: DictConfig) -> Grid:
    """Every name checked before any work: unknown names fail, listing the valid ones."""
    exp = cfg.experiment
    without_grammar(cfg, "experiments.compare")
    known = proposer_configs()
    listed = exp.methods is not None
    serving = exp.get("concurrency") is not None  # throughput against concurrency (measurement/throughput.py)
    rows = ["plain", *THROUGHPUT_ROWS] if serving else list(RUNNERS)
    methods = list(exp.methods) if listed else \
        [m for m in known if m not in UNDER_A_GRAMMAR] + (["plain", *THROUGHPUT_ROWS] if serving else list(DISCOVERED))
    wrong = [m for m in methods if m not in known and m not in rows and m != OWN]
    if wrong:
        raise ValueError(f"unknown methods {wrong} in experiment.methods (have {known + rows} and {OWN!r}"
                         + (", with experiment.concurrency" if serving else "") + ")")
    if serving:
        concurrencies(exp)
    if exp.baseline not in BASELINES:
        raise ValueError(f"experiment.baseline must be one of {list(BASELINES)}, got {exp.baseline!r}")
    if OWN in methods and cfg.proposer is None:
        raise ValueError(f"experiment.methods: {OWN!r} is the run's own proposer group, but proposer=none")
    categories = []  # the workload's (measurement.workload.build_workload checks experiment.categories)
    whole_number("experiment.max_new_tokens", exp.max_new_tokens, 1)  # an empty decode has no speed nor identity
    whole_number("experiment.per_category", exp.per_category, 1)
    whole_number("experiment.warmup", exp.warmup, 0)
    whole_number("experiment.check.samples", exp.check.samples, 0)
    if exp.samples is not None and (isinstance(exp.samples, bool) or not isinstance(exp.samples, int)
                                    or exp.samples < 1):
        raise ValueError("experiment.samples must be an integer >= 1 (prompts timed in all) or null, "
                         f"got {exp.samples!r}")
    wrong = [s for s in exp.samplings if s not in sampling_configs()]
    if wrong:
        raise ValueError(f"unknown samplings {wrong} in experiment.samplings (have {sampling_configs()})")
    samplings = {s: instantiate(option("sampling", s, cfg, "experiment.samplings")) for s in exp.samplings}
    if RUNNERS[exp.baseline].startswith("hf_"):  # every speedup needs it: refused here, before any work (a
        for law in samplings.values():         # method's row that cannot run a sampling is recorded with its error)
            hf_sampling(law)
    sizes = batch_sizes(exp)
    if RUNNERS[exp.baseline] in HF_METHODS and sizes != [1]:
        raise ValueError(f"experiment.baseline={exp.baseline} decodes one prompt at a time: experiment.batch_sizes "
                         f"must be [1] with it, got {sizes}")
    wrong = [p for p in nonempty_list(exp, "policies") if p not in policy_configs()]
    if wrong:
        raise ValueError(f"unknown policies {wrong} in experiment.policies (have {policy_configs()})")
    policies = {p: policy_factory(p, cfg) for p in exp.policies}
    device_profiles(exp)  # a wrong path or file fails before any work
    proposers = {m: option("proposer", m, cfg, "experiment.methods") for m in methods if m in known}
    if OWN in methods:  # the composed group, command-line overrides included: what a sweep varies
        proposers[OWN] = cfg.proposer
    skipped = missing_rows(cfg, methods)  # a peer engine whose environment is not built: said, not run
    methods = [m for m in methods if m not in skipped]
    decide_by = DeviceProfile.load(exp.policy_profile) if exp.get("policy_profile") else None
    if decide_by is not None:  # every cell's costs are in it, before any work
        for method, sampling, batch in product(proposers, samplings, sizes):
            decide_by.step_costs(method, sampling, batch)
    return Grid(methods, proposers, samplings, categories, skipped, pld_variants(cfg, methods), policies, sizes,
                decide_by)


def probe(grid: Grid, model, prompt: torch.Tensor, listed: bool) -> None:
    """Drops (discovered) or refuses (listed) proposer configs that cannot be built for this target
    or cannot decode on it (two tokens each), and transformers' MTP row where it would not read the target's own
    modules, before any timing."""
    refusal = transformers_mtp_refusal(model) if "hf_mtp" in grid.methods else None
    if refusal is not None:
        if listed:
            raise ValueError(f"experiment.methods: hf_mtp does not run on this target: {refusal}")
        grid.skipped["hf_mtp"] = refusal
        grid.methods.remove("hf_mtp")
    target = HFTarget(model)
    for name, node in list(grid.proposers.items()):
        try:
            generate(target, instantiate(node)(), prompt, 2, SamplingConfig(temperature=0))
        except Exception as error:  # noqa: BLE001 - any failure means "does not run here"
            if listed:
                raise ValueError(f"experiment.methods: {name} does not run on this target: {error}") from error
            grid.skipped[name] = f"{type(error).__name__}: {error}"
            del grid.proposers[name]
            grid.methods.remove(name)


def device_profiles(exp: DictConfig) -> dict[str, DeviceProfile]:
    """experiment.profile (this machine's: predictions) and experiment.project (another device's: projections)."""
    named = {PREDICTION: exp.get("profile"), PROJECTION: exp.get("project")}
    return {name: DeviceProfile.load(path) for name, path in named.items() if path}


def pld_variants(cfg: DictConfig, methods: list[str]) -> dict:
    """transformers' prompt lookup at its defaults, and (when hf_pld_matched runs) matched to the settings of
    our prompt-lookup config experiment.pld_matched."""
    variants = {"hf_pld": dict(HF_PLD_DEFAULTS)}
    if "hf_pld_matched" in methods:
        matched = option("proposer", cfg.experiment.pld_matched, cfg, "experiment.pld_matched")
        if "depth" not in matched or "max_ngram" not in matched:
            raise ValueError(f"experiment.pld_matched={cfg.experiment.pld_matched!r} is not a prompt lookup config "
                             "(it needs depth and max_ngram)")
        # our depth is transformers' num_output_tokens (prompt_lookup_num_tokens): its name, as HF_PLD_DEFAULTS
        variants["hf_pld_matched"] = {"num_tokens": int(matched.depth), "max_ngram": int(matched.max_ngram)}
    return variants
