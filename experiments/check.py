"""The harness for one method on real models (docs/design.md section 7).

    python -m experiments.check                                      # the zoo pair (chain of 4, iid)
    python -m experiments.check proposer=draft_tree experiment.checks=[exact]
    python -m experiments.check -m proposer=none,draft,draft_tree experiment.statistical.tv=0.02
    python -m experiments.check models=tiny proposer=draft

- greedy: token-for-token equal to plain greedy decoding (fp32 and fp64, several prompts).
- statistical: G-test of the joint law of the first D tokens against the target's law by teacher
  forcing, N sized for a total-variation error `tv`; a null bracket (the exact method rejected at
  about the nominal 5%); typical acceptance must fail at the same N.
- exact: a vocabulary-3 target through the real loop, every coin enumerated (TV <= 1e-9): the configured
  proposer built on the toy family (conf/models/toy.yaml: its ${models.*} read there, whatever the run's models).
- ragged: prompts of different lengths in one batch on the same toy, and requests admitted by the continuous-batching
  scheduler as others end: the joint law of their tokens equals the product of each prompt's own law (every row as
  alone, no coin shared; an EOS ends rows at different steps).
Writes <output_dir>/check.json; exits non-zero if any check fails.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import hydra
import torch
from hydra import compose
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.lm.text import encode_prompt, tokenizer_of
from harness.exact import compare
from harness.ragged import check_ragged_law, check_scheduled_law
from harness.real import (
    exact_loop_law,
    greedy_identity,
    statistical_check,
    teacher_forced_law,
)
from harness.stats import sample_size_for_law
from measurement.common import hydra_conf, one_process, policy_factory_of, verifier_of, without_grammar
from verifiers import typical_verifier


def _with(cfg: DictConfig, **overrides) -> DictConfig:
    """A copy of cfg with overrides. Each check builds from its own copy: instantiating a node that
    interpolates another (`draft_model: ${models.draft}`) resolves that one in place, which would pin
    ${target.dtype} for the checks after it."""
    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for key, value in overrides.items():
        OmegaConf.update(copy, key, value)
    return copy


def check_greedy(cfg: DictConfig) -> list[dict]:
    rows = []
    for dtype in cfg.experiment.greedy.dtypes:
        typed = _with(cfg, **{"target.dtype": dtype})
        target, make = instantiate(typed.target), instantiate(typed.proposer)
        tokenizer = tokenizer_of(target)
        for prompt in cfg.experiment.greedy.prompts:
            ids = encode_prompt(prompt, tokenizer)  # [1, L]
            policy = policy_factory_of(cfg)
            report = greedy_identity(target, make or (lambda: None), ids, cfg.experiment.greedy.max_new_tokens,
                                     verifier=verifier_of(cfg), policy=policy() if policy else None)
            rows.append({"check": "greedy", "setting": f"{dtype} prompt={ids[0].tolist()}", "passed": report.equal,
                         "detail": ("identical" if report.equal
                                    else f"first difference at token {report.first_difference}")})
    return rows


def check_statistical(cfg: DictConfig) -> list[dict]:
    s = cfg.experiment.statistical
    own = _with(cfg)
    target, make = instantiate(own.target), instantiate(own.proposer)
    prompt = encode_prompt(cfg.prompt, tokenizer_of(target))  # [1, L]
    rows = []

    laws = {}  # sampling name -> the target's teacher-forced law, computed once

    def law_of(name):
        if name not in laws:
            laws[name] = teacher_forced_law(target, prompt, s.depth, instantiate(s.samplings[name]),
                                            min_prob=s.min_prob)
        return laws[name]

    def g(name, n, seed, **kw):
        kw.setdefault("verifier", verifier_of(cfg))
        return statistical_check(target, make, prompt, instantiate(s.samplings[name]), n, s.depth, seed, s.batch,
                                 law=law_of(name), **kw)

    def sized(name, tv):  # N with power 0.9 against a TV error `tv` at the cells this law's test will have
        return sample_size_for_law(law_of(name), tv, s.alpha)[0]

    for name in s.samplings:
        n = sized(name, s.tv)
        result = g(name, n, cfg.seed)
        rows.append({"check": "statistical", "setting": f"{name} N={n}", "passed": result.passes(s.alpha),
                     "detail": f"G={result.test.statistic:.1f} dof={result.test.dof} p={result.test.p_value:.3g} "
                               f"power(TV {s.tv})={result.test.power(s.tv, s.alpha):.2f} (on its cells; "
                               f"mass pooled into one: {result.test.lumped:.3f})"})
    n = sized("t1", s.tv)
    null_n = sized("t1", s.null_tv)
    rejected = sum(not g("t1", null_n, cfg.seed + 1 + r).passes(0.05) for r in range(s.null_repeats))
    bound = max(3, int(0.05 * s.null_repeats + 3 * (0.05 * 0.95 * s.null_repeats) ** 0.5 + 1))
    rows.append({"check": "statistical", "setting": f"null bracket {s.null_repeats} x N={null_n}",
                 "passed": rejected <= bound,
                 "detail": f"{rejected}/{s.null_repeats} rejected at alpha=0.05 (allowed <= {bound})"})
    if make is not None:
        lossy = g("t1", n, cfg.seed, verifier=typical_verifier())
        rows.append({"check": "statistical", "setting": f"typical acceptance (must fail) N={n}",
                     "passed": not lossy.passes(s.alpha),
                     "detail": f"G={lossy.test.statistic:.1f} p={lossy.test.p_value:.3g} "
                               f"TV~{lossy.test.observed_tv:.3f}"})
    return rows


@cache
def _toy() -> dict:
    """The toy family's target and parts (models=toy), composed once, unresolved."""
    with hydra_conf():
        toy = compose(config_name="config", overrides=["models=toy"])
    return OmegaConf.to_container(OmegaConf.masked_copy(toy, ["target", "models"]), resolve=False)


def on_the_toy(cfg: DictConfig) -> DictConfig:
    """A copy of the run's config on the toy family: its target and `models` in place of the run's, so the
    configured proposer, overrides and all, reads the toy's parts through its own ${models.*}. A run already on
    it (models=toy, e.g. with target.num_layers=2) is kept as it is."""
    own = _with(cfg)
    if OmegaConf.select(cfg, "models.name") != "toy":
        for key, node in _toy().items():
            own[key] = node
    return own


def exact_setup(cfg: DictConfig):
    """The exact checks' toy target, the proposer built on the toy family, and the policy (or None)."""
    e, toy = cfg.experiment.exact, on_the_toy(cfg)
    target, make = instantiate(toy.target), instantiate(toy.proposer)
    policy = policy_factory_of(cfg, instantiate(e.policy_costs)) if cfg.get("policy") is not None else None
    return target, make, policy


def check_exact(cfg: DictConfig) -> list[dict]:
    e = cfg.experiment.exact
    target, factory, policy = exact_setup(cfg)
    prompt = torch.tensor([[1, 2, 0]])
    rows = []
    for name, node in e.samplings.items():
        sampling = instantiate(node)
        result = compare(exact_loop_law(target, factory, prompt, e.depth, sampling, verifier=verifier_of(cfg),
                                        policy_factory=policy),
                         teacher_forced_law(target, prompt, e.depth, sampling))
        rows.append({"check": "exact", "setting": name, "passed": result.passes(1e-9),
                     "detail": f"TV={result.tv:.1e} impossible={len(result.support_violations)}"})
    return rows


def check_ragged(cfg: DictConfig) -> list[dict]:
    """The exact joint law of a batch of prompts of different lengths (an EOS ends rows at different steps) against
    the product of each prompt's own law: every row decodes as it would alone (harness/ragged.py)."""
    e, r = cfg.experiment.exact, cfg.experiment.ragged
    target, factory, policy = exact_setup(cfg)
    requests = [(list(prompt), budget) for prompt, budget in r.scheduled.requests]
    rows = []
    for name in r.samplings:
        sampling = instantiate(e.samplings[name])
        batch = check_ragged_law(target, factory, [list(p) for p in r.prompts], r.depth, sampling, r.eos_token_id,
                                 verifier=verifier_of(cfg), policy_factory=policy)
        scheduled = check_scheduled_law(target, factory, requests, r.scheduled.max_batch, sampling, r.eos_token_id,
                                        verifier=verifier_of(cfg), policy_factory=policy)
        for result, what in ((batch, f"one batch, prompts of {', '.join(str(len(p)) for p in r.prompts)} tokens"),
                             (scheduled, f"scheduled: {len(requests)} requests, {r.scheduled.max_batch} at a time")):
            rows.append({"check": "ragged", "setting": name, "passed": result.passes(1e-9),
                         "detail": f"TV={result.tv:.1e} impossible={len(result.support_violations)} ({what})"})
    return rows


CHECKS = {"greedy": check_greedy, "statistical": check_statistical, "exact": check_exact, "ragged": check_ragged}


def run(cfg: DictConfig) -> list[dict]:
    one_process("experiments.check")
    without_grammar(cfg, "experiments.check")
    torch.set_num_threads(cfg.experiment.num_threads or torch.get_num_threads())
    unknown = set(cfg.experiment.checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)} (have {sorted(CHECKS)})")
    rows = [row for name in cfg.experiment.checks for row in CHECKS[name](cfg)]
    path = Path(cfg.output_dir) / "check.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(path, rows)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| check | setting | passed | detail |", "|---|---|---|---|"]
    lines += [f"| {r['check']} | {r['setting']} | {'yes' if r['passed'] else 'NO'} | {r['detail']} |" for r in rows]
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="check", version_base="1.3")
def main(cfg: DictConfig) -> None:
    rows = run(cfg)
    print(table(rows))
    if not all(r["passed"] for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
