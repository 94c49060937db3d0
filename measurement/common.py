"""What the entry points share: the configured verifier, timed decoding, threads, result files, a config
option composed beside a run's models, job records and overrides, held-out prompts and the target's continuations
of them. What only the training recipes share is recipes/common.py.

The apps (`python -m experiments.<name>`) import this and the libraries beside it in measurement/, never one
another (tests/test_layers.py).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from itertools import zip_longest
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import MissingConfigException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from engine.loop import DecodeOptions, GenerationOutput, generate
from framework.constraints.grammar import GrammarConstraint
from framework.control.costs import StepCosts
from framework.core import files
from framework.core.policy import with_costs
from framework.core.sampling import SamplingConfig
from framework.lm.sharding import launched_processes, shared_clock, writes_results
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_at, tokenizer_of
from framework.zoo.corpus import build_corpus, stdlib_files
from verifiers import LOSSLESS


def policy_factory_of(cfg: DictConfig, costs: StepCosts | None = None):
    """The configured speculation policy as a factory (a fresh policy per generation or world), or None (fixed).
    costs: what a policy sized by costs (CostSized: goodput) decides by instead of a clock (the exact check hands
    them: a clock would decide differently in each replay of a world); a policy that reads no cost ignores them."""
    node = cfg.get("policy")
    if node is None:
        return None
    make = instantiate(node)
    return make if costs is None else (lambda: with_costs(make(), costs))


def verifier_of(cfg: DictConfig):
    """The configured verification rule (conf/verifier; the token rule where a config has none)."""
    return instantiate(cfg.verifier) if cfg.get("verifier") is not None else LOSSLESS


def constraint_of(cfg: DictConfig, target: HFTarget) -> GrammarConstraint | None:
    """The run's grammar (cfg.grammar, conf/grammar) compiled for the target's tokenizer, or None. Compiled once
    per grammar and target: a constraint restarts its state at every prefill."""
    if cfg.get("grammar") is None:
        return None
    stop = stop_token_of(cfg, target)
    # keyed by what the compiled grammar depends on (not the model object's id, which a later model may reuse)
    key = (json.dumps(OmegaConf.to_container(cfg.grammar, resolve=True), sort_keys=True),
           target.model.config.name_or_path, target.vocab_size, stop)
    if key not in _CONSTRAINTS:
        tokenizer = tokenizer_of(target.model)
        if tokenizer is None:
            raise ValueError("a grammar needs the target's tokenizer (the token strings): this target has none")
        grammar = instantiate(cfg.grammar, _convert_="object")
        _CONSTRAINTS[key] = GrammarConstraint(grammar, tokenizer, target.vocab_size, [stop])
    return _CONSTRAINTS[key]


_CONSTRAINTS: dict[tuple, GrammarConstraint] = {}


def without_grammar(cfg: DictConfig, entry: str) -> None:
    """Refuse a grammar where an entry point's checks know none (their laws would silently be the free ones)."""
    if cfg.get("grammar") is not None:
        raise ValueError(f"{entry} takes no grammar (its checks know none): time methods under a grammar with "
                         "experiments.structured; their exact laws under grammars are tests/constraints")


def stop_token_of(cfg: DictConfig, target: HFTarget) -> int | None:
    """cfg.eos_token_id; under a grammar, the tokenizer's EOS when none is set (the grammar ends the text there)."""
    if cfg.eos_token_id is not None or cfg.get("grammar") is None:
        return cfg.eos_token_id
    eos = tokenizer_eos(target.model.config.name_or_path)
    if eos is None:
        raise ValueError("a grammar needs a stop token: set eos_token_id")
    return eos


@lru_cache
def tokenizer_eos(checkpoint: str) -> int | None:
    """The EOS of the tokenizer saved beside a checkpoint (read once per run: timed runs ask every time)."""
    tokenizer = tokenizer_at(checkpoint)
    return None if tokenizer is None else tokenizer.eos_token_id


def timed_generate(target: HFTarget, proposer, prompt: torch.Tensor, cfg: DictConfig, sampling,
                   max_new_tokens: int | None = None, policy=None, constraint=None) -> tuple[GenerationOutput, float]:
    """generate() with cfg's seed, EOS, verifier and grammar; max_new_tokens defaults to cfg.max_new_tokens;
    policy: how much each step speculates (None: as the proposer is configured); constraint: in place of the
    run's own (None: cfg.grammar's)."""
    verifier, stop = verifier_of(cfg), stop_token_of(cfg, target)  # before the clock starts
    constraint = constraint if constraint is not None else constraint_of(cfg, target)
    start = time.perf_counter()
    out = generate(target, proposer, prompt, cfg.max_new_tokens if max_new_tokens is None else max_new_tokens,
                   sampling=sampling, seed=cfg.seed,
                   options=DecodeOptions(eos_token_id=stop, verifier=verifier, policy=shared_clock(policy, target),
                                         constraint=constraint, logprobs=cfg.get("logprobs")))
    return out, time.perf_counter() - start  # generate returns CPU tokens: device work is done


def emitted(out: GenerationOutput) -> list[int]:
    """Row 0's new tokens, without the -1 padding."""
    return [t for t in out.tokens[0].tolist() if t >= 0]


@contextmanager
def torch_threads(count: int | None):
    """Run with `count` torch intra-op threads (None: as they are), restored afterwards."""
    threads = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def whole_number(name: str, value, least: int) -> int:
    """A setting that must be an integer >= least (Hydra passes `abc` or `2.5` through as they are)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return value


def job_record() -> dict:
    """What a result.json says of the job that wrote it: its config group choices and its command-line
    overrides (experiments.sweep_merge checks them against the job folder's own)."""
    if not HydraConfig.initialized():
        return {"choices": {}, "overrides": []}
    hydra_cfg = HydraConfig.get()
    return {"choices": {k: v for k, v in hydra_cfg.runtime.choices.items() if not k.startswith("hydra")},
            "overrides": list(hydra_cfg.overrides.task)}


def one_process(entry: str) -> None:
    """Entry points that write from every process refuse torchrun, named: sharded targets run in experiments.run
    (rank 0 writes) and experiments.sharded_check."""
    if launched_processes() > 1:
        raise SystemExit(f"{entry} runs in one process, and torchrun started {launched_processes()}: a sharded target "
                         "(target.tp_plan=auto) decodes under experiments.run or experiments.sharded_check; "
                         "target.device_map places it by layers in one process")


@contextmanager
def owned_output(output_dir: str, what: str, result: str = "result.json") -> Iterator[None]:
    """The run's folder for this run alone: held while it runs (a second run given the same folder is refused
    while the first runs), and refused before any work when it holds an earlier run's result, which this run
    would replace. Under torchrun rank 0 holds it (it alone writes)."""
    if not writes_results():
        yield
        return
    with files.exclusive(output_dir, what):
        if (Path(output_dir) / result).exists():
            raise files.FolderBusy(f"{Path(output_dir) / result} holds an earlier run's result: give this run another "
                                   "folder (hydra.run.dir=... / output_dir=...) or move that result away")
        yield


def write_json(output_dir: str, name: str, data) -> Path:
    """<output_dir>/<name>, folders made as needed, written whole; returns the path. Under torchrun only rank 0
    writes (the other ranks hold copies of its run)."""
    path = Path(output_dir) / name
    return files.write_json(path, data) if writes_results() else path


CONF = Path(__file__).resolve().parents[1] / "conf"


@contextmanager
def hydra_conf() -> Iterator[None]:
    """compose() needs an initialised Hydra: the app's inside `python -m`, conf/ when called from Python."""
    if GlobalHydra.instance().is_initialized():
        yield
    else:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            yield


def option(group: str, name: str, run: DictConfig, where: str) -> DictConfig:
    """conf/<group>/<name>.yaml composed beside the run's own target and models (its ${target.*} and
    ${models.*} read those); `where` names the setting that asked for it, for the error."""
    try:
        composed = _option_config(group, name)
    except MissingConfigException as error:
        known = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        raise ValueError(f"{where}: no {group} config {name!r} (conf/{group} has {known})") from error
    composed.target = OmegaConf.create(OmegaConf.to_container(run.target, resolve=True))
    if "models" in run:
        composed.models = OmegaConf.create(OmegaConf.to_container(run.models, resolve=True))
    return composed[group]


def _option_config(group: str, name: str) -> DictConfig:
    """The config with <group>=<name>: inside an app, composed by the app's Hydra; from Python, conf/ composed once
    per option and copied (a compose is ~0.1 s, a copy ~5 ms; the copy is the caller's to change)."""
    if GlobalHydra.instance().is_initialized():
        return _compose_option(group, name)
    return copy.deepcopy(_conf_option(group, name))


@lru_cache(maxsize=None)
def _conf_option(group: str, name: str) -> DictConfig:
    return _compose_option(group, name)


def _compose_option(group: str, name: str) -> DictConfig:
    with hydra_conf():
        return compose(config_name="config", overrides=[f"{group}={name}"])


def heldout_prompt(model, length: int) -> torch.Tensor:
    """[1, length] tokens: the start of the first held-out stdlib file, in the model's tokenizer."""
    tokenizer = tokenizer_of(model)
    if tokenizer is None:
        raise ValueError(f"{model.config.name_or_path} has no tokenizer: pass random=true for token-id prompts")
    text = build_corpus(stdlib_files())["heldout"]["text"][0]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:length]
    return torch.tensor([ids], dtype=torch.long)


def text_ids(model, tokens: int) -> list[int]:
    """`tokens` ids of held-out stdlib source in the model's tokenizer (random ids for a model without one)."""
    tokenizer = tokenizer_of(model)
    if tokenizer is None:
        return torch.randint(0, model.config.vocab_size, (tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    text = "\n".join(build_corpus(stdlib_files())["heldout"]["text"][:8])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) < tokens:
        raise ValueError(f"the held-out text has {len(ids)} tokens, the profile asks for {tokens}")
    return ids[:tokens]


def job_overrides(job: Path) -> dict:
    """The overrides Hydra recorded for a job folder ({} without .hydra/overrides.yaml)."""
    path = job / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    return parse_overrides(OmegaConf.to_container(OmegaConf.load(path), resolve=False))  # "x=${y}" stays text


def parse_overrides(lines: list[str]) -> dict:
    """["proposer=draft", "+x=3", "prompt=[1,2]"] -> {"proposer": "draft", "x": 3, "prompt": "[1,2]"}."""
    columns = {}
    for o in OverridesParser.create().parse_overrides(lines):
        value = o.value()
        scalar = value is None or isinstance(value, (str, int, float, bool))
        columns[o.get_key_element().lstrip("+")] = value if scalar else o.get_value_element_as_str()
    return columns


def prompt_ids(cfg: DictConfig, model, from_end: bool = False) -> list[list[int]]:
    """The workload's first (from_end: last, taken from each category's end in turn, away from the first ones a
    comparison times) prompts rendered for the target (text needs its tokenizer), else the run's token-id prompt."""
    tokenizer = tokenizer_of(model)
    if tokenizer is None:
        return [encode_prompt(cfg.prompt, None)[0].tolist()]
    rendering = instantiate(cfg.workload.render)
    prompts = instantiate(cfg.workload.suite).prompts()
    if from_end:
        by_category: dict[str, list] = {}
        for prompt in reversed(prompts):
            by_category.setdefault(prompt.category, []).append(prompt)
        prompts = [p for rank in zip_longest(*by_category.values()) for p in rank if p is not None]
    prompts = prompts[: cfg.search.prompts]
    return [rendering.render(tokenizer, prompt).ids for prompt in prompts]


def continuations(model, prompts: list[list[int]], prompt_tokens: int, new_tokens: int) -> tuple[torch.Tensor, int]:
    """Each prompt's last `prompt_tokens` tokens (fewer if a prompt is shorter) and the target's greedy continuation:
    windows [P, L + new_tokens] and L."""
    length = min(prompt_tokens, *(len(p) for p in prompts))
    windows = []
    for ids in prompts:
        prompt = torch.tensor([ids[-length:]])
        emitted = generate(HFTarget(model), None, prompt, new_tokens, SamplingConfig(temperature=0.0)).tokens
        windows.append(torch.cat([prompt[0], emitted[0, :new_tokens]]))
    return torch.stack(windows), length
