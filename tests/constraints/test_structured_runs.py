"""Grammars through the entry points on the zoo: experiments.run with a grammar and log-probabilities, and
experiments.structured's table (valid outputs, greedy identity) on a small setting."""

import re

import pytest
from hydra.utils import instantiate

from experiments.check import run as run_check
from experiments.compare import run as run_compare
from experiments.first_token import run as run_first_token
from experiments.run import run
from experiments.structured import run as run_structured
from experiments.structured import schema_errors
from tests.composed import composed

FAST = ["experiment.warmup=0", "experiment.repeats=1"]


def load(*overrides: str, config_name: str = "config"):
    return composed(config_name, *overrides)


def test_run_under_a_regex_with_logprobs(tmp_path):
    cfg = load("proposer=draft", "sampling=greedy", "grammar=identifier_list", "logprobs=2", "max_new_tokens=48",
               f"output_dir={tmp_path}", *FAST)
    result = run(cfg)
    assert result["tokens"] == result["plain_tokens"]  # greedy: the same tokens as constrained plain decoding
    regex = instantiate(cfg.grammar).regex
    assert result["tokens"][-1] == 0 and re.fullmatch(regex, result["text"].removesuffix("<|endoftext|>"))
    assert len(result["logprobs"]) == len(result["tokens"]) and all(lp <= 0 for lp in result["logprobs"])
    assert result["logprobs"] == pytest.approx(result["plain_logprobs"], abs=1e-4)
    assert all(str(t) in top or int(t) in top for t, top in zip(result["tokens"], result["top_logprobs"]))


def test_structured_reports_valid_identical_outputs(tmp_path):
    cfg = load("grammar=call_ebnf", "experiment.methods=[grammar]", "experiment.max_new_tokens=48",
               "experiment.repeats=1", "experiment.tree_nodes=4",
               "experiment.prompts=[\"import os\\n\\nresult = \"]", f"output_dir={tmp_path}", config_name="structured")
    result = run_structured(cfg)
    for name in ("plain", "grammar"):
        assert result["methods"][name]["valid"] == 1.0 and result["methods"][name]["greedy_identical"] == 1.0
    assert result["chain_cost"]["nodes"] == 4 and result["chain_cost"]["grammar_share"] > 0


def test_the_schema_checker_names_what_is_wrong():
    schema = load("grammar=json_record").grammar.json_schema
    good = {"name": "a", "path": "b", "size": 3, "readonly": True, "tags": ["x"]}
    assert schema_errors(good, schema) == []
    assert schema_errors({**good, "size": True}, schema) == ["$.size: not a integer"]
    assert schema_errors({**good, "extra": 1, "tags": ["x"] * 4}, schema) == ["$: extra extra", "$.tags: over 3 items"]


@pytest.mark.parametrize("entry, config_name",
                         [(run_check, "check"), (run_compare, "compare"), (run_first_token, "first_token")])
def test_entry_points_whose_checks_know_no_grammar_refuse_one(entry, config_name, tmp_path):
    cfg = load("grammar=identifier_list", f"output_dir={tmp_path}", config_name=config_name)
    with pytest.raises(ValueError, match="takes no grammar"):
        entry(cfg)
