"""experiments.bench_rows on the tiny random-weight models (token-id rows: they have no tokenizer for the corpus
windows): a proposer's time is split into model calls and the rest, and the table reads the ratios."""

from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from experiments.bench_rows import measure, table
from measurement.common import option

CONF = Path(__file__).resolve().parents[1] / "conf"


def test_a_proposers_time_is_split_into_model_calls_and_bookkeeping():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="bench_rows", overrides=["models=tiny"])
    model, sampling = instantiate(cfg.target), instantiate(cfg.sampling)
    torch.manual_seed(0)
    results = []
    for method in ("mix", "prompt_lookup"):
        factory = instantiate(option("proposer", method, cfg, "methods"))
        for batch in (1, 3):
            rows = torch.randint(0, model.config.vocab_size, (batch, 12))
            r = {"method": method, "batch": batch, **measure(model, factory, sampling, rows, 1, 2, 0)}
            assert r["step_ms"] >= r["proposer_ms"] >= r["in_models_ms"] >= 0, r
            assert abs(r["bookkeeping_ms"] - (r["proposer_ms"] - r["in_models_ms"])) < 0.02
            if method == "mix":
                assert r["in_models_ms"] > 0  # EAGLE-2's head runs inside the mix's calls
            else:
                assert r["in_models_ms"] == 0  # prompt lookup calls no model
            results.append(r)
    lines = table(results).splitlines()
    first = results[0]
    assert len(lines) == 2 + 4 and lines[2].startswith("| mix | 1 |")
    assert lines[2].endswith(f"| 1.0x | {first['bookkeeping_ms'] / first['proposer_ms']:.1f}x |")  # against itself
