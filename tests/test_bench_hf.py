"""experiment=bench_hf, compare's preset beside transformers, end to end on the tiny random-weight models
(token-id prompts, a few tokens): every method's cells against transformers' plain decoding."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments import compare
from framework.lm.text import tokenizer_of
from framework.zoo.checkpoints import find_folder
from measurement import compare_grid
from measurement.methods import other_tokenizer
from tests.composed import composed

CONF = Path(__file__).resolve().parents[1] / "conf"
PROPOSERS = ["draft", "draft_tree", "eagle3", "medusa", "mix_draft", "rest", "prompt_lookup", "lookahead"]
HF = ["hf_plain", "hf_assisted", "hf_prompt_lookup", "hf_pld_matched", "hf_early_exit"]
TINY = ["models=tiny", "experiment.prompts=[[1,2,3,4,5],[7,7,7,8,9,1,7,7]]", "experiment.max_new_tokens=10",
        "experiment.warmup=0", "experiment.assistant=draft"]  # timing is not checked here


def load(*overrides: str):
    return composed("compare", "experiment=bench_hf", *overrides)


def test_every_method_and_sampling_against_transformers_plain(tmp_path):
    methods = [*HF, "plain", *PROPOSERS]
    result = compare.run(load(*TINY, f"experiment.methods=[{','.join(methods)}]", f"output_dir={tmp_path}"))
    assert result["baseline"] == "hf_plain"
    rows = {(r["method"], r["sampling"]): r for r in result["rows"]}
    assert set(rows) == {(m, s) for m in methods for s in ("greedy", "t1")}
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    baseline = {(r["sampling"], r["prompt"]): r for r in records if r["id"].startswith("plain/")}
    assert len(baseline) == 4 and all(r["forwards"] == 10 for r in baseline.values())  # transformers: a forward a token
    for (method, sampling), r in rows.items():
        # no checks
        assert r["prompts"] == 2 and r["errors"] is None and r["lossless_check"] is None, (method, sampling)
        cell = [x for x in records if x["id"].startswith(f"run/{method}/{sampling}/")]
        assert r["speedup"] == pytest.approx(sum(x["plain_seconds"] for x in cell) / sum(x["seconds"] for x in cell))
        assert r["tokens_per_forward"] == pytest.approx(20 / sum(x["forwards"] for x in cell))
        assert (r["greedy_identical"] is None) == (sampling == "t1")
        assert (r["mean_accepted"] is None) == method.startswith("hf_")  # ours: from the loop's stats
    # float32 on a tiny model: no near-ties, so plain decodings agree with transformers' token for token
    assert (rows["plain", "greedy"]["greedy_identical"] == "2/2"
            and rows["hf_plain", "greedy"]["greedy_identical"] == "2/2")
    assert rows["plain", "greedy"]["tokens_per_forward"] == pytest.approx(1.0)
    settings = result["settings"]
    assert settings["hf_attention"] in ("sdpa", "eager") and settings["ours_attention"] == "speculum_tree"
    assert settings["hf_pld"] == {"hf_pld": {"num_tokens": 10, "max_ngram": 2},
                                  "hf_pld_matched": {"num_tokens": 4, "max_ngram": 3}}
    assistant = settings["assistant"]
    assert assistant["config"] == "draft" and assistant["num_assistant_tokens"] >= 1
    assert "| draft_tree | t1 | prompts |" in (tmp_path / "compare.md").read_text()


def test_the_preset_covers_every_proposer_and_transformers():
    """A proposer config added to conf/proposer/ without joining the side-by-side fails here."""
    methods = set(load().experiment.methods)
    assert (set(compare_grid.proposer_configs()) - set(compare_grid.UNDER_A_GRAMMAR) <= methods
            and {*HF, "plain"} <= methods)


def test_planted_errors_fail_before_timing(tmp_path):
    with pytest.raises(ValueError, match=r"unknown methods \['hf_beam'\]"):
        compare.run(load(*TINY, "experiment.methods=[hf_plain,hf_beam]", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="experiment.pld_matched='draft' is not a prompt lookup config"):
        compare.run(load(*TINY, "experiment.methods=[hf_pld_matched]", "experiment.pld_matched=draft",
                         f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="experiment.baseline must be one of"):
        compare.run(load(*TINY, "experiment.baseline=hf_beam", f"output_dir={tmp_path}"))
    with pytest.raises(ValueError, match="only temperature"):  # the baseline, transformers' plain decoding, cannot
        compare.run(load(*TINY, "experiment.methods=[plain]", "experiment.samplings=[topk20]",
                         f"output_dir={tmp_path}"))
    assert not (tmp_path / "compare.json").exists()


def test_an_assistant_with_another_tokenizer_gets_transformers_universal_assisted_generation():
    """experiment.assistant=cross_vocab: transformers is given both tokenizers (its universal assisted generation);
    a draft of the target's own tokenizer gets none."""
    # only the checkpoints' folders are read (their tokenizers), not their weights
    target, draft, other = (
        SimpleNamespace(config=SimpleNamespace(name_or_path=str(find_folder(name, "tokenizer.json"))))
        for name in ("target", "draft", "draft_bpe"))
    assert other_tokenizer(target, draft) == {}
    given = other_tokenizer(target, other)
    assert given["tokenizer"].get_vocab() == tokenizer_of(target).get_vocab()
    assert given["assistant_tokenizer"].get_vocab() == tokenizer_of(other).get_vocab() != given["tokenizer"].get_vocab()


def test_transformers_early_exit_drafts_from_the_exit_ours_chose(tmp_path):
    """hf_early_exit: transformers' assistant_early_exit at the exit layer our early_exit measured (auto) on the same
    target, greedy identical to plain; a fixed experiment.hf_exit_layer is taken as given."""
    methods = ["plain", "early_exit", "hf_early_exit"]
    run = load(*TINY, f"experiment.methods=[{','.join(methods)}]", "experiment.samplings=[greedy]",
               f"output_dir={tmp_path}")
    result = compare.run(run)
    rows = {r["method"]: r for r in result["rows"]}
    assert rows["hf_early_exit"]["greedy_identical"] == "2/2" and rows["early_exit"]["greedy_identical"] == "2/2"
    assert rows["hf_early_exit"]["tokens_per_forward"] >= 1.0  # the target's forwards only: its drafts cut the stack
    assert run.target.num_layers == 2 and result["settings"]["hf_early_exit"] == {"exit_layer": 1}  # the only exit
    fixed = compare.run(load(*TINY, "experiment.methods=[plain,hf_early_exit]", "experiment.samplings=[greedy]",
                             "target.num_layers=4", "experiment.hf_exit_layer=3", f"output_dir={tmp_path / 'fixed'}"))
    assert fixed["settings"]["hf_early_exit"] == {"exit_layer": 3}
    assert {r["method"]: r for r in fixed["rows"]}["hf_early_exit"]["greedy_identical"] == "2/2"
