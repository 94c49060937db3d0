"""experiments.bench_hf end to end on the tiny random-weight models (token-id prompts, a few tokens)."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.bench_hf import run, table
from experiments.methods import HF_METHODS

CONF = Path(__file__).resolve().parents[1] / "conf"
TINY_PROPOSERS = ["draft", "draft_tree", "eagle3", "medusa", "mix_draft", "rest", "prompt_lookup", "lookahead"]
METHODS = [*HF_METHODS, "ours_plain", *(f"ours_{p}" for p in TINY_PROPOSERS)]
TINY = ["models=tiny", "experiment.prompts=[[1,2,3,4,5],[7,7,7,8,9,1,7,7]]", "experiment.max_new_tokens=10",
        "experiment.warmup=0", "experiment.assistant=draft"]  # timing is not checked here


def load(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="bench_hf", overrides=list(overrides))


def test_every_method_and_sampling_reported(tmp_path):
    result = run(load(*TINY, f"experiment.methods=[{','.join(METHODS)}]", f"output_dir={tmp_path}"))
    assert result["methods"] == METHODS and result["samplings"] == ["greedy", "t1"]
    rows = {(r["method"], r["sampling"]): r for r in result["rows"]}
    assert set(rows) == {(m, s) for m in METHODS for s in ("greedy", "t1")}
    for (method, sampling), r in rows.items():
        assert r["prompts"] == 2 and r["tokens"] == 20, (method, sampling)  # EOS never stops a run
        assert 1 <= r["forwards"] <= 20 and r["tokens_per_forward"] == pytest.approx(20 / r["forwards"])
        assert r["speedup"] == pytest.approx(rows["hf_plain", sampling]["seconds"] / r["seconds"])
        assert (r["mismatches"] is None) == (sampling == "t1")
        assert (r["tokens_per_forward_stats"] is None) == method.startswith("hf_")
    for sampling in ("greedy", "t1"):  # plain decoding: per prompt a prefill + 9 steps, one token each
        assert rows["hf_plain", sampling]["forwards"] == rows["ours_plain", sampling]["forwards"] == 20
    # float32 on a tiny model: no near-ties, so plain decodings agree token for token
    assert rows["ours_plain", "greedy"]["mismatches"] == 0 and rows["hf_plain", "greedy"]["mismatches"] == 0
    settings = result["settings"]
    assert settings["hf_attention"] in ("sdpa", "eager") and settings["ours_attention"] == "speculum_tree"
    assert settings["hf_pld"] == {"hf_pld": {"num_tokens": 10, "max_ngram": 2}, "hf_pld_matched": {"num_tokens": 4, "max_ngram": 3}}
    assistant = settings["assistant"]
    assert assistant["config"] == "draft" and assistant["num_assistant_tokens"] >= 1
    assert assistant["num_assistant_tokens_schedule"] in ("constant", "heuristic", "heuristic_transient")
    written = json.loads((tmp_path / "bench_hf.json").read_text())
    assert written["rows"] == result["rows"]
    assert "| ours_draft_tree | t1 |" in table(result) and "hf_pld_matched K=4 M=3" in table(result)


def test_default_methods_cover_every_proposer():
    """A proposer config added to conf/proposer/ without joining the benchmark fails here."""
    methods = load().experiment.methods
    proposers = {p.stem for p in (CONF / "proposer").glob("*.yaml")} - {"none"}
    assert {f"ours_{p}" for p in proposers} <= set(methods)
    assert {*HF_METHODS, "ours_plain"} <= set(methods)


def test_planted_errors_fail_before_timing(tmp_path):
    with pytest.raises(ValueError, match="experiment.methods: ours_no_such_proposer: no proposer config 'no_such_proposer'"):
        run(load(*TINY, "experiment.methods=[hf_plain,ours_no_such_proposer]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match=r"unknown methods \['hf_beam'\]"):
        run(load(*TINY, "experiment.methods=[hf_plain,hf_beam]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="needs hf_plain"):
        run(load(*TINY, "experiment.methods=[ours_plain]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="only temperature"):
        run(load(*TINY, "experiment.samplings=[greedy,topk20]", f"output_dir={tmp_path}"))
    assert not (tmp_path / "bench_hf.json").exists()
