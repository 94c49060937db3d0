"""A tensor-parallel target decodes as one process does (docs/design.md section 16). Run under torchrun:

    torchrun --nproc-per-node 2 -m experiments.sharded_check                       # gloo on CPU, tiny models
    torchrun --nproc-per-node 2 -m experiments.sharded_check 'methods=[draft,eagle3]' 'laws=[chain2-iid-T1]'
    TRITON_INTERPRET=1 torchrun --nproc-per-node 2 -m experiments.sharded_check 'backends=[reference,triton]'  # CPU

Every rank holds the target sharded by heads (tp_plan=auto) and, beside it, the same target whole, built
locally. Checks, each on every rank:
- greedy: each method's tokens on the sharded target equal plain greedy decoding of the whole one (and its
  own speculative tokens there), at batch 2; under the goodput policy (every rank on rank 0's clock); on the
  other tree attentions (SDPA is the CPU's default; the Triton kernel runs on a CPU under TRITON_INTERPRET=1);
- exact law: the law of the first tokens through the real loop on the sharded toy target (vocabulary 3,
  enumerated) equals the whole toy target's own law (harness.real), and a bug planted in the sharded
  target's KV commit is caught;
- refusals: ranks that part (each its own seed) stop with a named error, not a hang; a draft over another
  vocabulary and a process count that does not divide the heads are named.
Rank 0 prints the table and writes result.json in the run folder; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import time

import hydra
import torch
from hydra import compose
from hydra.utils import instantiate
from omegaconf import DictConfig

from engine.loop import DecodeOptions, generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.sharding import launched_processes, process_rank, shared_clock, writes_results
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.loop_mutants import CropInsteadOfGather
from harness.real import exact_loop_law, teacher_forced_law
from measurement.common import hydra_conf, policy_factory_of, write_json
from proposers import DraftModelProposer

GREEDY = SamplingConfig(temperature=0)

# The harness's toy target with a key-value head per rank (its one-KV-head twin cannot be split in two).
TOY = dict(vocab_size=3, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=2, dtype="float64", init_std=0.3)
LAWS = {  # name: (DraftModelProposer settings, sampling, tokens of the law)
    "chain2-iid-T1": (dict(depth=2, kind="iid"), SamplingConfig(), 3),
    "chain2-wor-T0.7-topk2": (dict(depth=2, kind="wor"), SamplingConfig(temperature=0.7, top_k=2), 3),
    "tree2x2-point-penalty1.5": (dict(branching=2, depth=2, kind="point"), SamplingConfig(repetition_penalty=1.5), 3),
    "tree3x1-point-T1": (dict(branching=3, depth=1, kind="point"), SamplingConfig(), 4),
}
# A bug planted in the sharded target, which the exact law must catch: the commit keeps the first slots of the
# tree (a scalar rewind) instead of the accepted path (harness.loop_mutants).
PLANTED = ("tree3x1-point-T1", CropInsteadOfGather)


def greedy_case(method: str, tokens: int, policy: str = "fixed", backend: str = "auto") -> dict:
    """One method on the sharded tiny target against the whole one (batch 2, greedy); policy=goodput plans each
    step from measured costs (rank 0's clock on every rank); backend: the sharded target's tree attention."""
    with hydra_conf():
        cfg = compose(config_name="config", overrides=["models=tiny", f"proposer={method}", f"policy={policy}"])
    sharded = HFTarget(instantiate(cfg.target, tp_plan="auto"), backend=backend)
    whole = HFTarget(instantiate(cfg.target))
    make, make_policy = instantiate(cfg.proposer), policy_factory_of(cfg)
    prompt = torch.tensor([list(cfg.prompt), list(reversed(cfg.prompt))])
    plain = generate(whole, None, prompt, tokens, GREEDY).tokens
    spec = generate(sharded, make() if make else None, prompt, tokens, GREEDY,
                    options=DecodeOptions(policy=shared_clock(make_policy() if make_policy else None, sharded)))
    own = generate(whole, make() if make else None, prompt, tokens, GREEDY).tokens
    name = (f"greedy {method}" + ("" if policy == "fixed" else f" under policy={policy}")
            + ("" if backend == "auto" else f" on the {backend} tree attention"))
    return {"check": name, "passed": torch.equal(spec.tokens, plain) and torch.equal(own, plain),
            "detail": f"{tokens} tokens x 2 rows, {spec.stats.summary()['mean_accepted']:.2f} accepted per step, "
                      f"depths drafted {[int(step.drafted.max()) for step in spec.stats.steps]}"}


def law_case(name: str, target_factory=HFTarget) -> dict:
    """The exact law of the sharded toy target's first tokens through the real loop against the whole one's;
    with a planted bug (target_factory), it must differ."""
    settings, sampling, depth = LAWS[name]
    prompt = torch.tensor([[1, 2, 0]])
    draft = tiny_random_model("llama", seed=1, **{**TOY, "num_kv_heads": 1})
    sharded = tiny_random_model("llama", seed=0, tp_plan="auto", **TOY)
    law = exact_loop_law(sharded, lambda: DraftModelProposer(draft, **settings), prompt, depth, sampling,
                         target_factory=target_factory)
    result = compare(law, teacher_forced_law(tiny_random_model("llama", seed=0, **TOY), prompt, depth, sampling))
    detail = f"first {depth} tokens, {len(law)} outcomes, TV {result.tv:.1e}"
    if target_factory is HFTarget:
        return {"check": f"exact law {name}", "passed": result.passes(1e-9), "detail": detail}
    return {"check": f"planted {target_factory.__name__} caught ({name})", "passed": result.tv > 1e-6, "detail": detail}


def refused(check: str, expected: str, action) -> dict:
    """`action` must raise an error whose message holds `expected`."""
    try:
        action()
    except (RuntimeError, ValueError) as error:
        return {"check": check, "passed": expected in str(error), "detail": str(error)[:160]}
    return {"check": check, "passed": False, "detail": "no error"}


def refusals() -> list[dict]:
    target = tiny_random_model("llama", seed=0, tp_plan="auto")
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    other_vocabulary = tiny_random_model("llama", seed=1, num_layers=1, vocab_size=72)
    return [
        refused("ranks that part stop, named", "ranks disagree",
                lambda: generate(HFTarget(target), None, prompt, 8, SamplingConfig(), seed=process_rank())),
        refused("a draft over another vocabulary, named", "vocabulary",
                lambda: generate(HFTarget(target), DraftModelProposer(other_vocabulary, depth=2), prompt, 8, GREEDY)),
        refused(f"{launched_processes()} processes for 3 heads, named", "does not divide",
                lambda: tiny_random_model("llama", hidden_size=24, num_heads=3, num_kv_heads=3, tp_plan="auto")),
    ]


@hydra.main(config_path="../conf", config_name="sharded_check", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if launched_processes() < 2:
        raise SystemExit("start it with torchrun --nproc-per-node N (N >= 2): a sharded target needs N processes")
    unknown = [name for name in cfg.laws if name not in LAWS]
    if unknown:
        raise SystemExit(f"unknown exact-law cases {unknown} (have {', '.join(LAWS)})")
    checks = [lambda m=m: [greedy_case(m, cfg.tokens)] for m in cfg.methods]
    checks += [lambda p=p: [greedy_case("self_draft", cfg.tokens, p)] for p in cfg.policies]
    checks += [lambda b=b: [greedy_case("self_draft", cfg.tokens, backend=b)] for b in cfg.backends]
    checks += [lambda n=n: [law_case(n)] for n in cfg.laws]
    checks += [lambda: [law_case(PLANTED[0], PLANTED[1])]] if cfg.planted else []
    checks.append(refusals)
    results = []
    for check in checks:
        start = time.perf_counter()
        done = check()
        results += [{**r, "seconds": round((time.perf_counter() - start) / len(done), 2)} for r in done]
    for r in results if writes_results() else ():
        print(f"{'ok  ' if r['passed'] else 'FAIL'} {r['check']} ({r['seconds']:.1f} s): {r['detail']}")
    write_json(cfg.output_dir, "result.json", {"processes": launched_processes(), "results": results})
    if not all(r["passed"] for r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
