"""The harness through a peer engine's outputs: each vLLM row samples the first `depth` tokens after the check prompt
N times (one request each, vLLM's own coins), and a G-test sets the counts against the target's teacher-forced law
(harness.real: transformers' own forwards and processors, nothing of vLLM's or of our loop).

    python -m experiments.peers.law                                   # every row of experiment.vllm, N = 4,000
    python -m experiments.peers.law 'rows=[vllm_speculum_pld]' samples=20000

vLLM verifies a draft that comes without probabilities (n-gram, our custom proposer) as a point draft: exact if its
rejection sampler is right; this is the measurement that says whether it is. Writes peer_law.json in the run folder.
"""

from __future__ import annotations

from collections import Counter

import hydra
from omegaconf import DictConfig

from framework.core.sampling import SamplingConfig
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.checkpoints import load_causal_lm
from harness.real import lump, teacher_forced_law
from harness.stats import g_test
from measurement.common import write_json
from measurement.peers.engine import PeerEngine
from measurement.peers.rows import PEER, proposer_env, speculative_config, target_folder

RUN_ON = 6  # tokens decoded past `depth`: an engine drafts no further than its budget, so a request stopped at depth
            # would see few drafts; the first `depth` tokens are counted (their law does not depend on what follows)
TOP = 8  # the most frequent outcomes kept per row, each with its count expected under the target's law
MIN_PROB = 1e-5  # prefixes below this are lumped into one outcome (at N = 4,000 each is expected 0.04 times)


def target_laws(cfg: DictConfig, depth: int) -> tuple[list[int], dict[int, dict]]:
    """The check prompt's ids and the target's teacher-forced law of its first d tokens, for d = 1..depth."""
    model = load_causal_lm(target_folder(cfg), cfg.target.get("dtype", "float32"))
    prompt = encode_prompt(cfg.peer_law.prompt, tokenizer_of(model))
    laws = {d: teacher_forced_law(model, prompt, d, SamplingConfig(temperature=1.0), min_prob=MIN_PROB)
            for d in range(1, depth + 1)}
    return prompt[0].tolist(), laws


def engine_law_check(cfg: DictConfig, row: str, samples: int, depth: int, laws: dict[int, dict] | None = None,
                     prompt: list[int] | None = None) -> dict:
    """G-tests of the first d tokens (d = 1..depth) of `samples` outputs of one vLLM row at temperature 1, each
    request unseeded (vLLM's generator); the verdict is the depth's. Drafts and accepted count whole requests. The
    first d where the test fails says which token went wrong: the first comes from the prefill, no draft decides it."""
    settings = cfg.experiment.vllm
    if row not in settings.rows:
        raise ValueError(f"no vLLM row {row!r} in experiment.vllm.rows (have {list(settings.rows)})")
    if samples < 1 or depth < 1:
        raise ValueError(f"samples and depth must be >= 1, got {samples}, {depth}")
    if prompt is None or laws is None:
        prompt, laws = target_laws(cfg, depth)
    with PeerEngine(PEER, target_folder(cfg), int(settings.max_model_len), speculative_config(settings.rows[row]),
                    cfg.target.get("dtype", "float32"), int(cfg.experiment.num_threads or 1), int(cfg.seed),
                    settings.python, int(settings.kv_cache_gib), worker_env=proposer_env(settings, row)) as engine:
        out = engine.generate([prompt] * samples, depth + RUN_ON, {"temperature": 1.0}, None)
    tests = {d: g_test(lump(Counter(tuple(t[:d]) for t in out.tokens), laws[d]), laws[d]) for d in range(1, depth + 1)}
    test = tests[depth]
    seen = Counter(tuple(t[:depth]) for t in out.tokens).most_common(TOP)
    return {"row": row, "samples": samples, "depth": depth, "g_test_p": test.p_value, "passes": test.passes(1e-3),
            "detectable_tv": test.detectable_tv(), "dof": test.dof, "observed_tv": test.observed_tv,
            "p_by_depth": {d: t.p_value for d, t in tests.items()},
            "most_seen": [{"tokens": list(k), "count": n, "law": laws[depth].get(k, 0.0) * samples} for k, n in seen],
            "drafts": out.counters.drafts, "accepted": out.counters.accepted, "seconds": out.seconds}


@hydra.main(config_path="../../conf", config_name="peer_law", version_base="1.3")
def main(cfg: DictConfig) -> None:
    check = cfg.peer_law
    prompt, laws = target_laws(cfg, check.depth)
    results = []
    for row in check.rows:
        results.append(engine_law_check(cfg, row, check.samples, check.depth, laws, prompt))
        print({k: v for k, v in results[-1].items() if k != "most_seen"}, flush=True)
    write_json(cfg.output_dir, "peer_law.json", {"results": results, "prompt": prompt})


if __name__ == "__main__":
    main()
