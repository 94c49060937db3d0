"""experiments.compare on the tiny random-weight models: cells, outputs, resume, faults, bad names."""

import csv
import json
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from transformers import AutoTokenizer

from experiments import compare
from framework.control.device_profile import DeviceProfile
from framework.zoo.checkpoints import EMBEDDED
from harness.stats import detectable_tv
from measurement import compare_cells, compare_grid, compare_records, throughput
from measurement.compare_outputs import COLUMNS
from measurement.compare_publish import BEGIN, END, merge, publish, update_readme
from measurement.compare_report import BY_CATEGORY, policies_side_by_side
from measurement.workload import Workload, build_workload
from tests.composed import composed

CONF = Path(__file__).resolve().parents[1] / "conf"
TINY = ["models=tiny", "experiment.prompts=[[1,2,3,4,5],[7,7,7,8,9,1,7]]", "experiment.max_new_tokens=5",
        "experiment.assistant=draft", "prompt=[1,2,3]", "experiment.check.samples=256", "experiment.check.batch=256",
        "experiment.policies=[fixed]"]  # the cells as configured; the tests of policies name theirs
METHODS = ["draft", "prompt_lookup", "hf_assisted", "hf_prompt_lookup"]


def load(tmp_path, *overrides: str):
    return composed("compare", *TINY, f"output_dir={tmp_path}", *overrides)


def records(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]


def test_every_cell_with_speed_identity_and_a_lossless_check(tmp_path):
    result = compare.run(load(tmp_path, f"experiment.methods=[{','.join(METHODS)}]"))
    rows = {(r["method"], r["sampling"]): r for r in result["rows"]}
    assert set(rows) == {(m, s) for m in METHODS for s in ("greedy", "t1")}
    runs = [r for r in records(tmp_path) if r["id"].startswith("run/")]
    for (method, sampling), r in rows.items():
        assert r["category"] == "prompts" and r["prompts"] == 2 and r["errors"] is None
        cell = [x for x in runs if x["method"] == method and x["sampling"] == sampling]
        assert r["speedup"] == pytest.approx(sum(x["plain_seconds"] for x in cell) / sum(x["seconds"] for x in cell))
        assert r["tokens_per_forward"] == pytest.approx(10 / sum(x["forwards"] for x in cell))
        if sampling == "greedy":  # float32 on a tiny model: no near-ties, so every method matches plain
            assert r["greedy_identical"] == "2/2" and r["lossless_check"] is None
        elif method.startswith("hf_"):
            assert r["lossless_check"] is None and r["mean_accepted"] is None  # our harness checks our loop only
        else:
            assert r["lossless_check"] == "pass" and r["check_samples"] == 256
            # the TV error 256 samples detect with power 0.9 at the test's degrees of freedom (at least one)
            assert detectable_tv(256, 1) <= r["check_detectable_tv"] < 1
            assert (tmp_path / f"first_token_{method}_t1.png").exists()
    with (tmp_path / "compare.csv").open() as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == COLUMNS and len(table) == 16  # the cells, then the summary (category "all")
    summary = {(r["method"], r["sampling"]): r for r in result["summary"]}
    assert summary["draft", "t1"]["speedup"] == rows["draft", "t1"]["speedup"]  # one category: the same
    assert json.loads((tmp_path / "compare.json").read_text())["rows"] == result["rows"]
    assert "| draft | t1 | prompts |" in (tmp_path / "compare.md").read_text()
    for png in ("speedup_by_category", "accepted_length", "accepted_length_per_request", "time_split"):
        assert (tmp_path / f"{png}.png").stat().st_size > 0
    metrics_by_definition(tmp_path, result, runs)


def metrics_by_definition(tmp_path, result, runs):
    """Both accepted lengths and the per-position rates from the records' own counts, the checks passed, latency
    for every row (first-token time for ours only), a speculation profile per drafting cell, the configuration."""
    for r in result["summary"]:
        cell = [x for x in runs if x["method"] == r["method"] and x["sampling"] == r["sampling"]]
        steps = [(a, d) for x in cell for t in x["traces"] for a, d in zip(t["accepted"], t["drafted"]) if d]
        assert r["e2e_p50"] is not None
        assert 0 < r["ttft_p50"] <= r["e2e_p50"] and r["tpot_p50"] > 0  # transformers' first token from a streamer
        if r["method"].startswith("hf_") or not steps:  # no steps: transformers'; a lookup that never matched
            assert r["accepted_length_pooled"] is None
            continue
        assert r["consistency"] == "ok" and r["ttft_p50"] is not None and r["tpot_p99"] >= r["tpot_p50"]
        assert r["accepted_length_pooled"] == pytest.approx(1 + sum(a for a, _ in steps) / len(steps))
        assert r["accepted_length_pooled"] == pytest.approx(1 + sum(r["marginal"]))
        per_request = [1 + sum(a for a, d in zip(t["accepted"], t["drafted"]) if d) / sum(1 for d in t["drafted"] if d)
                       for x in cell for t in x["traces"]]
        assert r["accepted_length_per_request"] == pytest.approx(sum(per_request) / len(per_request))
        profile = json.loads((tmp_path / "profiles" / r["method"] / r["sampling"]
                              / "speculation_profile.json").read_text())
        assert profile["mean_accept_length"] == pytest.approx(r["accepted_length_pooled"])
        assert (profile["validation"]["mean_consistency"]["passed"]
                and profile["measurement_conditions"]["concurrency"] == 1)
    text = (tmp_path / "compare.md").read_text()
    assert "### Acceptance by definition and latency" in text and "### Configuration" in text
    assert "- draft: draft vocabulary 64;" in text


def test_rerun_skips_done_cells_and_a_failing_cell_does_not_stop_the_rest(tmp_path):
    compare.run(load(tmp_path, "experiment.methods=[draft]", "experiment.samplings=[t1]"))
    first = records(tmp_path)
    # transformers maps temperature only: its top-k rows fail, each recorded with its error
    result = compare.run(load(tmp_path, "experiment.methods=[draft,hf_assisted]", "experiment.samplings=[t1,topk20]"))
    later = records(tmp_path)[len(first):]
    assert not any(r["method"] == "draft" and r["sampling"] == "t1" for r in later)  # done before: skipped
    assert not any(r["id"].startswith("check/draft/t1/") for r in later)
    rows = {(r["method"], r["sampling"]): r for r in result["rows"]}
    assert ("only temperature" in rows["hf_assisted", "topk20"]["errors"]
            and rows["hf_assisted", "topk20"]["speedup"] is None)
    assert rows["draft", "topk20"]["errors"] is None and rows["draft", "topk20"]["lossless_check"] == "pass"
    assert rows["draft", "t1"]["prompts"] == 2  # read back from the first run's records
    assert "error: " in (tmp_path / "compare.md").read_text()
    # another workload or check prompt is another measurement: nothing of the above is reused for it
    before = len(records(tmp_path))
    compare.run(load(tmp_path, "experiment.methods=[draft]", "experiment.samplings=[t1]",
                     "experiment.prompts=[[5,4,3,2]]", "prompt=[3,2,1]"))
    again = records(tmp_path)[before:]
    assert any(r["id"].startswith("run/draft/t1/") for r in again)
    assert any(r["id"].startswith("check/draft/t1/") for r in again)


def test_discovery_skips_the_configs_that_do_not_fit_the_target(tmp_path):
    """A draft of another vocabulary (models.draft.vocab_size=32 beside a 64-token target) is listed as
    skipped when discovered, and is an error when asked for by name."""
    wrong_draft = "models.draft.vocab_size=32"
    grid = compare_grid.grid_of(load(tmp_path, "experiment.methods=[draft,prompt_lookup,hf_assisted,hf_mtp]",
                                     wrong_draft))
    grid.skipped, model = {}, instantiate(load(tmp_path).target)
    compare_grid.probe(grid, model, torch.tensor([[1, 2, 3]]), listed=False)  # as for discovered configs
    assert grid.methods == ["prompt_lookup", "hf_assisted"] and "vocabulary" in grid.skipped["draft"]
    assert "LlamaForCausalLM's config states none (num_mtp_layers)" in grid.skipped["hf_mtp"]  # no MTP in a Llama
    with pytest.raises(ValueError, match="draft does not run on this target"):
        compare_grid.probe(compare_grid.grid_of(load(tmp_path, "experiment.methods=[draft]", wrong_draft)), model,
                      torch.tensor([[1, 2, 3]]), listed=True)


@pytest.mark.slow  # composes every proposer config (~5 s)
def test_discovery_lists_every_config(tmp_path):
    grid = compare_grid.grid_of(load(tmp_path))
    assert set(grid.methods) == ({*compare_grid.proposer_configs(), *compare_grid.DISCOVERED}
                                 - set(compare_grid.UNDER_A_GRAMMAR))


@pytest.mark.parametrize("override, message", [
    ("experiment.methods=[draft,beam_search]", r"unknown methods \['beam_search'\].*'draft'"),
    ("experiment.samplings=[greedy,t9]", r"unknown samplings \['t9'\].*'t1'"),
    ("experiment.max_new_tokens=0", r"experiment.max_new_tokens must be an integer >= 1, got 0"),  # issue 58, case 6
    ("experiment.per_category=0", r"experiment.per_category must be an integer >= 1, got 0"),
    ("experiment.per_category=-2", r"experiment.per_category must be an integer >= 1, got -2"),
    ("experiment.check.samples=-1", r"experiment.check.samples must be an integer >= 0, got -1"),
])
def test_unknown_names_fail_before_any_work(tmp_path, override, message):
    with pytest.raises(ValueError, match=message):
        compare.run(load(tmp_path, override))
    assert not (tmp_path / "records.jsonl").exists()


def test_own_proposer_needs_one(tmp_path):
    with pytest.raises(ValueError, match="the run's own proposer group, but proposer=none"):
        compare_grid.grid_of(load(tmp_path, "experiment.methods=[proposer]", "proposer=none"))


def test_unknown_category_lists_the_workloads(tmp_path):
    cfg = load(tmp_path, "experiment.prompts=null", "experiment.categories=[code_continuation,poetry]")
    with pytest.raises(ValueError, match=r"unknown categories \['poetry'\].*workload zoo has.*'code_continuation'"):
        build_workload(cfg, AutoTokenizer.from_pretrained(EMBEDDED / "target"), None)


def test_readme_section_is_replaced_between_its_markers(tmp_path):
    readme, table = tmp_path / "README.md", tmp_path / "compare.md"
    readme.write_text(f"# title\nbefore\n{BEGIN}\nold table\n{END}\nafter\n")
    table.write_text(f"| new | table |\n\n{BY_CATEGORY}\n\n| every | cell |\n")
    update_readme(table, readme)
    assert readme.read_text() == f"# title\nbefore\n{BEGIN}\n| new | table |\n{END}\nafter\n"
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="needs exactly one"):
        update_readme(table, readme)


def test_publishing_writes_every_cell_to_the_results_page(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(f"{BEGIN}\n{END}\n")
    table = tmp_path / "compare.md"
    table.write_text(f"| summary |\n\n{BY_CATEGORY}\n\n| every | cell |\n")
    (tmp_path / "time_split.png").write_bytes(b"png")
    publish(table, tmp_path)
    page = (tmp_path / "docs" / "results.md").read_text()
    assert page.startswith("# Results") and table.read_text() in page
    assert page.endswith("![time_split](results/time_split.png)\n")
    assert (tmp_path / "docs" / "results" / "time_split.png").read_bytes() == b"png"
    assert "| every | cell |" not in (tmp_path / "README.md").read_text()
    (tmp_path / "README.md").write_text("no markers: not touched\n")
    publish(table, tmp_path, page="results_spec_bench", readme=False)
    assert (tmp_path / "docs" / "results_spec_bench.md").read_text().startswith("# Results: results_spec_bench")


def test_a_throughput_table_is_published_to_its_own_page_with_its_plots(tmp_path):
    (tmp_path / "docs").mkdir()
    table = tmp_path / "run" / "throughput.md"
    table.parent.mkdir()
    table.write_text("# Throughput against concurrency\n\n| method | c=1 |\n")
    (table.parent / "throughput_greedy.png").write_bytes(b"png")
    with pytest.raises(ValueError, match="publish_readme=false"):
        publish(table, tmp_path, page="results_throughput")
    publish(table, tmp_path, page="results_throughput", readme=False)
    page = (tmp_path / "docs" / "results_throughput.md").read_text()
    assert table.read_text() in page and page.endswith(
        "![throughput_greedy](results_throughput/throughput_greedy.png)\n")
    assert (tmp_path / "docs" / "results_throughput" / "throughput_greedy.png").read_bytes() == b"png"


@pytest.mark.slow
def test_compare_smoke_on_the_zoo(tmp_path):
    """The documented smoke run: every method that runs on the zoo, both transformers rows."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose(config_name="compare", overrides=["experiment=compare_smoke", f"output_dir={tmp_path}"])
    result = compare.run(config)
    methods = {r["method"] for r in result["rows"]}
    assert ({*compare_grid.proposer_configs(), "hf_assisted", "hf_prompt_lookup"}
            - set(compare_grid.UNDER_A_GRAMMAR)) <= methods
    assert not result["skipped"]
    assert all(r["errors"] is None for r in result["rows"])
    assert all(r["lossless_check"] == "pass" for r in result["rows"]
               if r["sampling"] == "t1" and not r["method"].startswith("hf_"))


def test_merge_keeps_the_jobs_of_a_sweep_apart(tmp_path):
    """A -m sweep writes one compare.json per job: the merged table names each job's variant."""
    for job, depth in (("0", 1), ("1", 3)):
        folder = tmp_path / job
        overrides = ["experiment.methods=[proposer]", "proposer=draft", f"proposer.depth={depth}"]
        config = load(folder, *overrides, "experiment.samplings=[greedy]")
        assert compare_grid.grid_of(config).proposers["proposer"].depth == depth  # the override reaches the method
        compare.run(config)
        (folder / ".hydra").mkdir()  # as Hydra's multirun writes it
        (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    merged = merge(tmp_path)
    names = [r["method"] for r in merged["summary"]]
    assert names == [f"proposer (proposer.depth={d})" for d in (1, 3)]  # only what the sweep varied
    assert f"| {names[1]} | greedy | all |" in (tmp_path / "compare.md").read_text()
    assert len(list(csv.DictReader((tmp_path / "compare.csv").open()))) == 4
    with pytest.raises(ValueError, match="no compare.json"):
        merge(tmp_path / "0" / ".hydra")
    with pytest.raises(ValueError, match="not a folder"):
        merge(tmp_path / "missing")


def test_a_lossy_method_fails_its_check(tmp_path, monkeypatch):
    """The check's verdict comes from the samples: a planted bias (every sampled first token moved to
    the next id, as a verifier with an off-by-one would emit) is reported as FAIL."""
    real = compare_cells.first_tokens

    def shifted(*args, **kwargs):
        result = real(*args, **kwargs)
        return {**result, "counts": result["counts"].roll(1)}

    monkeypatch.setattr(compare_cells, "first_tokens", shifted)
    result = compare.run(load(tmp_path, "experiment.methods=[draft]", "experiment.samplings=[t1]"))
    assert result["rows"][0]["lossless_check"] == "FAIL" and result["rows"][0]["check_p"] < 1e-3


def test_a_record_cut_off_by_a_kill_is_made_again(tmp_path):
    """A half-written last line of records.jsonl crashed the rerun; now it is dropped, said, and redone."""
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"id": "run/a", "key": "k", "seconds": 1.0}) + "\n" + '{"id": "run/b", "key": "k", "sec')
    with pytest.warns(UserWarning, match="last line was cut off"):
        stored = compare_records.Records(path, lambda record: "k")
    assert set(stored.done) == {"run/a"}
    stored.add({"id": "run/b", "seconds": 2.0})
    assert set(compare_records.Records(path, lambda record: "k").done) == {"run/a", "run/b"}


def run_records(tmp_path) -> list[dict]:
    return [r for r in records(tmp_path) if r["id"].startswith("run/")]


def test_batches_are_timed_against_plain_decoding_of_the_same_batch(tmp_path):
    """batch_sizes [1, 2]: our rows at both, transformers' at 1 only (said in the report); every row's tokens
    count and each is compared with plain decoding's row of the same batch."""
    result = compare.run(load(tmp_path, "experiment.methods=[draft,hf_prompt_lookup]", "experiment.samplings=[greedy]",
                              "experiment.batch_sizes=[1,2]"))
    rows = {(r["method"], r["batch"]): r for r in result["rows"]}
    assert set(rows) == {("draft", 1), ("draft", 2), ("hf_prompt_lookup", 1)}
    assert all(r["policy"] == "fixed" and r["errors"] is None for r in result["rows"])
    pair = [r for r in run_records(tmp_path) if r["method"] == "draft" and r["batch"] == 2]
    assert [r["id"] for r in pair] == ["run/draft/greedy/prompts/0/batch=2", "run/draft/greedy/prompts/1/batch=2"]
    assert all(r["new_tokens"] == 2 * 5 for r in pair)  # both rows' tokens
    assert rows["draft", 2]["tokens_per_s"] == pytest.approx(20 / sum(r["seconds"] for r in pair))
    assert rows["draft", 2]["prompts"] == 4 and rows["draft", 2]["greedy_identical"] == "4/4"
    assert rows["draft", 1]["greedy_identical"] == "2/2"
    plain = [r for r in records(tmp_path) if r["id"].startswith("plain/") and r["batch"] == 2]
    assert all(len(r["tokens"]) == 2 for r in plain)  # the baseline decoded the same two-row batch
    table = (tmp_path / "compare.md").read_text()
    assert "| method | sampling | category | batch |" in table and "| draft | greedy | all | 2 |" in table
    assert "so their rows (hf_prompt_lookup) are at batch size 1 only" in table and "| policy |" not in table
    assert {row["batch"] for row in csv.DictReader((tmp_path / "compare.csv").open())} == {"1", "2"}
    assert (tmp_path / "speedup_vs_batch.png").stat().st_size > 0


def test_a_batch_is_consecutive_prompts_each_whole():
    pool = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11, 12], [13, 14, 15]]
    work = Workload({"c": pool}, {"c": 3})
    assert work.batch("c", 1, 1).tolist() == [pool[1]]  # size 1: the prompt as it is
    assert work.batch("c", 0, 2).tolist() == [[1, 2, 3, 4, 5, -1, -1], [6, 7, 8, 9, 10, 11, 12]]
    assert work.batch("c", 2, 2).tolist() == [[13, 14, 15, -1, -1], [1, 2, 3, 4, 5]]  # wraps around
    assert work.batch("c", 1, 4).tolist() == [pool[1], pool[2] + [-1] * 4, pool[0] + [-1] * 2, pool[1]]


def test_batch_one_records_made_before_the_axes_are_reused(tmp_path):
    """Records without batch or policy fields (as written before these axes) are batch 1 under the fixed
    policy: a run that adds batch size 2 times batch 2 only."""
    compare.run(load(tmp_path, "experiment.methods=[draft]", "experiment.samplings=[greedy]"))
    old = [{k: v for k, v in r.items() if k not in ("batch", "policy")} for r in records(tmp_path)]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    result = compare.run(load(tmp_path, "experiment.methods=[draft]", "experiment.samplings=[greedy]",
                              "experiment.batch_sizes=[1,2]"))
    later = records(tmp_path)[len(old):]
    assert later and all(r["batch"] == 2 for r in later if "batch" in r)
    assert [(r["batch"], r["prompts"]) for r in result["summary"]] == [(1, 2), (2, 4)]


class CountingPolicy:
    """Stands for a policy object: the batch sizes of the generate calls it was given to."""

    def __init__(self, made: list):
        self.batches = []
        made.append(self)


def test_one_policy_object_per_method_policy_sampling_and_batch(tmp_path, monkeypatch):
    """A policy besides fixed (a stand-in here, taken out again before generate's own loop) is built once
    per (method, policy, sampling, batch size) and handed to every prompt of that cell; plain decoding has no
    speculation to size: fixed only. The tables get a policy column."""
    import measurement.common

    real = measurement.common.generate
    monkeypatch.setattr(compare_grid, "policy_configs", lambda: ["counting", "fixed"])
    made = []
    monkeypatch.setattr(compare_grid, "policy_factory",
                        lambda name, cfg: partial(CountingPolicy, made) if name == "counting" else None)

    def generate(target, proposer, prompt, *args, options, **kwargs):
        if options.policy is not None:
            options.policy.batches.append(prompt.shape[0])
        return real(target, proposer, prompt, *args, options=replace(options, policy=None), **kwargs)

    monkeypatch.setattr(measurement.common, "generate", generate)
    result = compare.run(load(tmp_path, "experiment.methods=[draft,plain]", "experiment.policies=[fixed,counting]",
                              "experiment.batch_sizes=[1,2]", "experiment.check.samples=0"))
    # one per sampling and size, each given both prompts; and one untimed throwaway per size (prime_policies)
    assert sorted(p.batches for p in made) == [[1], [1, 1], [1, 1], [2], [2, 2], [2, 2]]
    cells = {(r["method"], r["policy"], r["batch"]) for r in result["summary"]}
    assert cells == {(m, p, b) for m, p in (("draft", "fixed"), ("draft", "counting"), ("plain", "fixed"))
                     for b in (1, 2)}
    assert "run/draft/t1/prompts/1/policy=counting/batch=2" in {r["id"] for r in run_records(tmp_path)}
    table = (tmp_path / "compare.md").read_text()
    assert ("| method | policy | sampling | category | batch |" in table
            and "| draft | counting | t1 | all | 2 |" in table)
    assert "the rows without one (plain) run under fixed only." in table
    assert json.loads((tmp_path / "result.json").read_text())["summary"].keys() >= {"draft/counting/t1/batch=2",
                                                                                     "draft/t1"}


def test_each_cell_drafts_from_a_suffix_cache_of_its_own(tmp_path, monkeypatch):
    """The suffix config's cache spans requests: within a (method, policy, sampling, batch) cell its prompts share
    one, but no cell drafts from another's answers to the same prompts (a greedy cell's answers would inflate the
    goodput cell's acceptance)."""
    import measurement.common

    real, seen = measurement.common.generate, []

    def generate(target, proposer, prompt, *args, options, sampling=None, **kwargs):
        if proposer is not None and options.policy is not None:  # the timed cells (nothing else: no priming below)
            seen.append(((type(options.policy).__name__, sampling.greedy), proposer.cache))
        return real(target, proposer, prompt, *args, options=options, sampling=sampling, **kwargs)

    monkeypatch.setattr(measurement.common, "generate", generate)
    monkeypatch.setattr(compare, "prime_policies", lambda *args: None)  # its untimed runs use the config's own cache
    compare.run(load(tmp_path, "experiment.methods=[suffix]", "experiment.policies=[off_above,goodput]",
                     "experiment.samplings=[greedy,t1]", "experiment.check.samples=0"))
    caches: dict = {}
    for cell, cache in seen:
        caches.setdefault(cell, set()).add(id(cache))
    assert len(caches) == 4 and all(len(ids) == 1 for ids in caches.values())  # each cell: one, for both prompts
    assert len(set.union(*caches.values())) == 4 and all(cache.tokens > 0 for _, cache in seen)


def test_the_goodput_policy_has_rows_of_its_own(tmp_path):
    result = compare.run(load(tmp_path, "experiment.methods=[draft,eagle2]", "experiment.policies=[fixed,goodput]",
                              "experiment.check.samples=0"))
    cells = {(r["method"], r["policy"]): r for r in result["summary"] if r["sampling"] == "t1"}
    assert set(cells) == {(m, p) for m in ("draft", "eagle2") for p in ("fixed", "goodput")}
    assert all(r["speedup"] is not None for r in cells.values())
    assert compare_grid.policy_factory("fixed", load(tmp_path)) is None
    table = tmp_path / "compare.md"
    assert ("| method | greedy: fixed | greedy: goodput | t1: fixed | t1: goodput | greedy identical "
            "| lossless check (as configured) |") in table.read_text()
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{BEGIN}\nold\n{END}\ntail\n")
    update_readme(table, readme)
    published = readme.read_text()
    assert "t1: goodput" in published and "### By method" not in published and "| eagle2 | " in published


@pytest.mark.parametrize("overrides, message", [
    (["experiment.batch_sizes=[1,0]"], r"experiment.batch_sizes must hold distinct integers >= 1, got \[1, 0\]"),
    (["experiment.batch_sizes=4"], r"experiment.batch_sizes must be a non-empty list, got 4"),
    (["experiment.policies=[fixed,fastest]"],
     r"unknown policies \['fastest'\] in experiment.policies \(have \[.*'fixed'"),
    (["experiment.baseline=hf_plain", "experiment.batch_sizes=[1,4]"], r"hf_plain decodes one prompt at a time"),
    (["experiment.samples=0"], r"experiment.samples must be an integer >= 1 \(prompts timed in all\) or null, got 0"),
])
def test_bad_axes_fail_naming_the_setting(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        compare_grid.grid_of(load(tmp_path, *overrides))


def test_throughput_against_concurrency_serves_every_request_with_each_method(tmp_path):
    """experiment.concurrency: every prompt a request through continuous batching at each level, ours beside
    transformers' batched generate (two rounds, the median pass kept); greedy tokens identical to plain decoding's; a
    table and a plot per sampling."""
    result = compare.run(load(tmp_path, "experiment.methods=[plain,prompt_lookup,hf_batched]",
                              "experiment.samplings=[greedy]",
                              "experiment.prompts=[[1,2,3,4,5],[7,7],[3,1,4,1,5,9,2,6],[8]]",
                              "experiment.concurrency=[1,3]", "experiment.rounds=2"))
    rows = {(r["method"], r["concurrency"]): r for r in result["rows"]}
    assert set(rows) == {(m, c) for m in ("plain", "prompt_lookup", "hf_batched") for c in (1, 3)}
    assert all(r["tokens"] == 4 * 5 and r["identical"] for r in rows.values())
    assert rows["plain", 3]["speedup"] == 1.0 and rows["plain", 3]["mean_batch"] > 1  # up to 3 decode together
    assert rows["plain", 1]["mean_batch"] == 1.0
    assert (tmp_path / "throughput_greedy.png").stat().st_size > 0 and "c=3" in (tmp_path / "throughput.md").read_text()


@pytest.mark.parametrize("override, message", [
    ("experiment.concurrency=[0]", "distinct integers >= 1"),
    ("experiment.methods=[hf_assisted]", "with experiment.concurrency"),
    ("experiment.rounds=0", "experiment.rounds must be an integer >= 1"),
])
def test_a_bad_throughput_setting_is_named(tmp_path, override, message):
    with pytest.raises(ValueError, match=message):
        compare.run(load(tmp_path, "experiment.concurrency=[1]", override))


def test_a_runner_that_fails_at_one_concurrency_reports_it_there_and_the_run_goes_on(tmp_path, monkeypatch):
    """A peer engine that crashes at c=3 (vLLM's seeded sampler did, at 16 rows): that row says its error, every
    other row and level is measured, the table and plot are written."""
    real = throughput.hf_batched

    def crashing(model, cfg):
        run = real(model, cfg)

        def run_or_crash(requests, sampling, concurrency):
            if concurrency == 3:
                raise RuntimeError("engine died")
            return run(requests, sampling, concurrency)
        return run_or_crash

    monkeypatch.setattr(throughput, "hf_batched", crashing)
    result = compare.run(load(tmp_path, "experiment.methods=[plain,hf_batched]", "experiment.samplings=[greedy]",
                              "experiment.prompts=[[1,2,3],[7,7]]", "experiment.concurrency=[1,3]"))
    rows = {(r["method"], r["concurrency"]): r for r in result["rows"]}
    assert rows["hf_batched", 3] == {"sampling": "greedy", "concurrency": 3, "method": "hf_batched", "requests": 2,
                                     "error": "RuntimeError: engine died"}
    assert rows["hf_batched", 1]["identical"] and rows["plain", 3]["speedup"] == 1.0
    assert "error: RuntimeError: engine died" in (tmp_path / "throughput.md").read_text()
    assert (tmp_path / "throughput_greedy.png").stat().st_size > 0


def test_a_device_profile_puts_each_rows_predicted_speedup_beside_the_measured(tmp_path):
    """A profile where a forward costs 1 s (whatever its size) and a start 1 s per prompt token: a run's predicted
    seconds are its steps and its prompt's tokens, so the predicted speedup pairs each run with the plain run timed
    beside it on the same prompt (the two prompts differ in length), and its error is against the measured speedup;
    transformers' rows have no trace and no prediction."""
    per_method = lambda value: {m: value for m in ("plain", "prompt_lookup")}  # noqa: E731
    DeviceProfile({}, "toy", {1: {0: {0: 1.0}}}, per_method({1: {0: 0.0, 1: 1.0}}),
                  {"prompt_lookup": {"greedy": {1: {0: 0.0}}}}, per_method({"greedy": {1: {0: 0.0}}}),
                  per_method({1: 0.0})).save(tmp_path / "profile.json")
    result = compare.run(load(tmp_path, "experiment.methods=[prompt_lookup,hf_prompt_lookup]",
                              "experiment.samplings=[greedy]", f"experiment.profile={tmp_path}/profile.json",
                              f"experiment.project={tmp_path}/profile.json"))
    rows = {r["method"]: r for r in result["rows"]}
    runs = {r["prompt"]: r for r in records(tmp_path) if r["id"].startswith("run/prompt_lookup/")}
    plains = {r["id"]: r for r in records(tmp_path) if r["id"].startswith("plain/")}
    assert all(plains[r["plain_id"]]["prompt"] == prompt for prompt, r in runs.items())
    lengths = {0: 5, 1: 7}  # TINY's prompts
    predicted = sum(r["forwards"] - 1 + lengths[p] for p, r in runs.items())  # every forward but the prefill is a step
    plain = sum(plains[r["plain_id"]]["forwards"] - 1 + lengths[p] for p, r in runs.items())
    assert rows["prompt_lookup"]["predicted_speedup"] == pytest.approx(plain / predicted)
    seconds = sum(r["seconds"] for r in runs.values())
    assert rows["prompt_lookup"]["seconds_error"] == pytest.approx(predicted / seconds - 1)
    measured = sum(r["plain_seconds"] for r in runs.values()) / seconds
    assert rows["prompt_lookup"]["prediction_error"] == pytest.approx(plain / predicted / measured - 1)
    assert rows["hf_prompt_lookup"]["predicted_speedup"] is None
    assert rows["prompt_lookup"]["projected_speedup"] == rows["prompt_lookup"]["predicted_speedup"]  # the same costs
    assert "predicted speedup (error) | projected speedup |" in (tmp_path / "compare.md").read_text()
    with pytest.raises(FileNotFoundError, match="no device profile"):
        compare_grid.grid_of(load(tmp_path, f"experiment.profile={tmp_path}/missing.json"))


def test_a_policy_profile_sizes_each_goodput_cell_by_its_methods_costs(tmp_path, monkeypatch):
    """experiment.policy_profile: every goodput cell's policy decides by the profile's costs for its method,
    sampling and batch size (no clock); the fixed cells have none to take; a method or sampling the profile lacks
    fails before any work, naming the command that profiles it."""
    from framework.control.goodput import GoodputPolicy

    both = lambda value: {m: value for m in ("plain", "prompt_lookup")}  # noqa: E731
    laws = lambda value: {s: value for s in ("greedy", "t1")}  # noqa: E731
    DeviceProfile({}, "toy", {1: {0: {0: 1.0, 8: 1.4}}, 2: {0: {0: 1.5, 8: 2.0}}}, both({1: {0: 0.0}}),
                  {"prompt_lookup": laws({1: {0: 0.0, 4: 0.4}})}, both(laws({1: {0: 0.01, 8: 0.02}})),
                  both({1: 0.005})).save(tmp_path / "profile.json")
    used = []
    real = GoodputPolicy.use_costs
    monkeypatch.setattr(GoodputPolicy, "use_costs", lambda self, costs: used.append(costs) or real(self, costs))
    compare.run(load(tmp_path, "experiment.methods=[prompt_lookup]", "experiment.policies=[fixed,goodput]",
                     "experiment.batch_sizes=[1,2]", "experiment.check.samples=0",
                     f"experiment.policy_profile={tmp_path}/profile.json"))
    assert len(used) == 4  # (greedy, t1) x (1, 2): one policy per cell
    assert (sorted(c.target[0] for c in used) == [1.0, 1.0, 1.5, 1.5]
            and all(c.draft == pytest.approx((0.0, 0.1)) for c in used))
    run = [r for r in records(tmp_path) if r["id"].startswith("run/prompt_lookup/") and "policy=goodput" in r["id"]]
    assert len(run) == 8 and not any("error" in r for r in run)
    with pytest.raises(ValueError, match=r"draft table has no 'draft' .*profile_device 'methods=\[..., draft\]'"):
        compare_grid.grid_of(load(tmp_path, "experiment.methods=[draft]",
                             f"experiment.policy_profile={tmp_path}/profile.json"))


def test_policies_side_by_side_is_a_row_per_method_with_projections_in_brackets():
    def row(method, sampling, policy, speedup, projected=None, check=None):
        return {"method": method, "sampling": sampling, "policy": policy, "batch": 1, "speedup": speedup,
                "projected_speedup": projected, "greedy_identical": "2/2" if sampling == "greedy" else None,
                "lossless_check": check, "check_samples": 64 if check else None, "check_detectable_tv": 0.1,
                "check_p": 0.5}
    summary = [row("draft", "greedy", "fixed", 1.2, 1.75), row("draft", "greedy", "goodput", 1.1, 1.5),
               row("draft", "t1", "fixed", 0.9, 1.2, "pass"), row("draft", "t1", "goodput", 1.0, 1.0),
               row("medusa", "greedy", "fixed", 0.8), row("medusa", "t1", "fixed", None)]
    text = policies_side_by_side(summary)
    assert ("| method | greedy: fixed | greedy: goodput | t1: fixed | t1: goodput | greedy identical "
            "| lossless check (as configured) |") in text
    # projections beside the fixed policy's cells only (goodput decided by this device's costs)
    assert ("| draft | 1.20x (1.75x) | 1.10x | 0.90x (1.20x) | 1.00x | 2/2, 2/2 "
            "| t1: pass (N=64, TV 0.100, p=0.500) |") in text
    assert ("| medusa | 0.80x | - | - | - | 2/2 | - |" in text
            and "in brackets, the fixed policy's run projected" in text)
    assert policies_side_by_side([r for r in summary if r["policy"] == "fixed"]) == ""


def test_the_default_policy_is_goodput_and_rows_without_a_proposer_run_fixed(tmp_path):
    """Issue 56: goodput sizes every proposer's steps by default (compare's and the run's config); transformers'
    rows have nothing to size and run under fixed though it is not listed, with their own rows."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        assert list(compose(config_name="compare").experiment.policies) == ["goodput"]
        assert compose(config_name="config").policy._target_ == "framework.control.goodput.GoodputPolicy"
    result = compare.run(load(tmp_path, "experiment.policies=[goodput]", "experiment.methods=[draft,hf_prompt_lookup]",
                              "experiment.samplings=[greedy]", "experiment.check.samples=0"))
    cells = {(r["method"], r["policy"]) for r in result["summary"]}
    assert cells == {("draft", "goodput"), ("hf_prompt_lookup", "fixed")}
    assert all(r["speedup"] is not None and r["greedy_identical"] == "2/2" for r in result["summary"])
    assert "Policies side by side" not in (tmp_path / "compare.md").read_text()  # no method ran under two


def test_a_cells_factory_renews_the_shared_stores_it_holds_and_nothing_else():
    """renewed (measurement.methods): a suffix cache renewed where it sits, also inside a mix's parts; every other
    argument the same object, and a factory with nothing to renew returned as it is."""
    from functools import partial as hydra_partial

    from measurement.methods import renewed
    from proposers import MixProposer, PromptLookupProposer, SuffixCache, SuffixProposer

    cache, lookup = SuffixCache(max_tokens=50), hydra_partial(PromptLookupProposer, max_ngram=3)
    mix = hydra_partial(MixProposer, parts={"suffix": hydra_partial(SuffixProposer, cache=cache), "lookup": lookup},
                        budget=8)
    fresh = renewed(mix)
    part = fresh.keywords["parts"]["suffix"].keywords["cache"]
    assert part is not cache and part.max_tokens == 50 and fresh.keywords["parts"]["lookup"] is lookup
    assert (renewed(lookup) is lookup
            and renewed(hydra_partial(SuffixProposer, cache=cache)).keywords["cache"] is not cache)
    assert fresh().parts[0].cache is part  # the mix built from it drafts from the renewed cache
