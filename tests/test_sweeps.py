"""Sweeps: a -m sweep as parallel local processes (joblib), on submitit's local executor, the Optuna
search of the draft's settings, and experiments.sweep_merge over a sweep folder.

The launcher tests run the real CLI in a subprocess on the random-weight tiny models; their time
is mostly the imports of torch and transformers, once in the parent and once in each worker.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import OmegaConf

from experiments.sweep_merge import collect, report
from measurement.compare_report import aggregate

CONF = Path(__file__).resolve().parents[1] / "conf"
TINY_SWEEP = ["models=tiny", "proposer=draft,none", "prompt=[1,2,3]", "max_new_tokens=4",
              "experiment.warmup=0", "experiment.repeats=1"]


def multirun(module: str, *overrides: str, folder: Path) -> str:
    """`python -m module -m overrides` with its sweep in folder; returns what it printed."""
    done = subprocess.run([sys.executable, "-m", module, "-m", *overrides, f"hydra.sweep.dir={folder}"],
                          cwd=folder.parent, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout + done.stderr


def check_tiny_sweep(folder: Path) -> None:
    rows = collect(folder)
    assert [(r["job"], r["proposer"]) for r in rows] == [("0", "draft"), ("1", "none")]
    for r in rows:
        assert "error" not in r, r
        assert (r["models"], r["prompt"], r["max_new_tokens"]) == ("tiny", "[1,2,3]", 4)
        assert r["speedup"] > 0 and r["stats:tokens_per_forward"] >= 1


@pytest.mark.slow  # launches real jobs: ~25 s of process start-up and imports
def test_joblib_runs_the_jobs_as_parallel_processes(tmp_path):
    printed = multirun("experiments.run", *TINY_SWEEP, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                       folder=tmp_path / "sweep")
    assert "Joblib.Parallel(n_jobs=2,backend=loky,prefer=processes" in printed  # loky: worker processes
    check_tiny_sweep(tmp_path / "sweep")


@pytest.mark.slow  # launches real jobs: ~20-35 s of process start-up and imports
def test_submitit_local_runs_the_sweep(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="pip install -e '.[cluster]'")
    multirun("experiments.run", *TINY_SWEEP, "hydra/launcher=submitit_local", folder=tmp_path / "sweep")
    assert (tmp_path / "sweep" / ".submitit").is_dir()  # submitit's own files: not job folders
    check_tiny_sweep(tmp_path / "sweep")


@pytest.mark.slow  # launches real jobs: ~20-35 s of process start-up and imports
def test_optuna_maximises_the_measured_speedup(tmp_path):
    """Two trials on one short zoo prompt: each job's result.json holds total plain s / total
    speculative s, and the study's best value is the largest of them, so main returned that figure."""
    multirun("experiments.compare", "experiment=categories", "hydra/sweeper=tune_draft", "hydra.sweeper.n_trials=2",
             "experiment.categories=[code_continuation]", "experiment.per_category=1", "experiment.max_new_tokens=4",
             folder=tmp_path / "sweep")
    rows = collect(tmp_path / "sweep")
    assert len(rows) == 2 and not any("error" in r for r in rows), rows
    for r in rows:
        assert r["proposer"] == "draft" and 1 <= r["proposer.depth"] <= 8
        assert 0.0 <= r["proposer.stop_below"] <= 0.6
        assert r["speedup"] > 0 and r["summary:proposer/t1"] == r["speedup"]
    best = OmegaConf.load(tmp_path / "sweep" / "optimization_results.yaml")
    assert best.best_value == pytest.approx(max(r["speedup"] for r in rows))


def ends(text: str) -> list:
    """The extreme values of one sweeper param: interval(a, b) -> [a, b], choice(...) -> its choices."""
    override = OverridesParser.create().parse_override(f"x={text}")
    value = override.value()
    if override.is_interval_sweep():
        return [value.start, value.end]
    return list(value.list) if override.is_choice_sweep() else [value]


def test_tune_draft_maximises_over_settings_that_all_build():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="compare", overrides=["experiment=categories", "hydra/sweeper=tune_draft"],
                      return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert 1 <= sweeper.n_trials <= 10 and sweeper.n_jobs == 1  # few trials; one at a time, timed alone
    params = dict(sweeper.params)
    assert params.pop("proposer") == "draft"  # fixed: the settings below are this config's
    assert {"depth", "stop_below"} <= {k.removeprefix("proposer.") for k in params}
    factory = instantiate(cfg.proposer)  # the zoo draft, loaded once; each corner only rebuilds the tree
    names = [k.removeprefix("proposer.") for k in params]
    for corner in itertools.product(*(ends(v) for v in params.values())):
        factory(**dict(zip(names, corner)))  # a corner no proposer accepts would fail every trial there


def test_overall_speedup_is_total_plain_over_total_speculative():
    """A cell's speedup (the sweeper's objective for one cell) weighs each prompt by its time."""
    records = [{"id": f"run/proposer/t1/{c}/{i}", "method": "proposer", "sampling": "t1", "category": c, "prompt": i,
                "seconds": s, "plain_seconds": p, "new_tokens": 4, "forwards": 2, "plain_forwards": 4}
               for c, i, s, p in (("a", 0, 1.0, 2.0), ("a", 1, 1.0, 2.0), ("b", 0, 1.0, 1.0))]
    row = aggregate(["proposer"], ["t1"], ["all"], [{**r, "category": "all"} for r in records])[0]
    assert row["speedup"] == pytest.approx(5 / 3)  # not the mean of 2.0 and 1.0
    assert row["step_cost"] == pytest.approx((3.0 / 6) / (5.0 / 12))


def fake_job(folder: Path, overrides: list[str], result: str | None) -> None:
    (folder / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(overrides), folder / ".hydra" / "overrides.yaml")
    if result is not None:
        (folder / "result.json").write_text(result)


def test_a_crashed_job_is_a_row_with_its_error(tmp_path, capsys):
    sweep = tmp_path / "multirun" / "2026-12-01" / "10-00-00"
    result = {"speedup": 1.5, "stats": {"tokens_per_forward": 2.0}, "tokens": [1, 2], "config": {"seed": 0}}
    fake_job(sweep / "0", ["proposer=draft", "+experiment.tag=a"], json.dumps(result))
    fake_job(sweep / "2", ["proposer=none", "+experiment.tag=b"], None)  # crashed before writing a result
    fake_job(sweep / "10", ["proposer=draft", "+experiment.tag=c"], "{not json")
    (sweep / ".submitit" / "123").mkdir(parents=True)  # a launcher's files: no job there
    rows = collect(tmp_path / "multirun")
    assert [r["job"] for r in rows] == ["2026-12-01/10-00-00/0", "2026-12-01/10-00-00/2", "2026-12-01/10-00-00/10"]
    assert rows[0] == {"job": "2026-12-01/10-00-00/0", "proposer": "draft", "experiment.tag": "a",
                       "speedup": 1.5, "stats:tokens_per_forward": 2.0}
    assert rows[1]["proposer"] == "none" and "no result.json" in rows[1]["error"]
    assert rows[2]["proposer"] == "draft" and "unreadable result.json" in rows[2]["error"]

    printed = report(sweep)
    assert "| 2 | none | b |  | no result.json" in printed and "3 jobs, 2 with an error, 0 never started" in printed
    with (sweep / "sweep.csv").open() as f:
        written = list(csv.DictReader(f))
    assert [r["job"] for r in written] == ["0", "2", "10"]
    assert written[0]["error"] == "" and written[1]["error"].startswith("no result.json")
    assert written[0]["stats:tokens_per_forward"] == "2.0"


def test_a_folder_without_jobs_is_named(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match=f"no Hydra job folders .* under {re.escape(str(tmp_path / 'empty'))}$"):
        collect(tmp_path / "empty")
    with pytest.raises(ValueError, match="not a folder"):
        collect(tmp_path / "missing")
    with pytest.raises(ValueError, match="not a folder"):
        report(tmp_path / "missing")


def test_jobs_a_killed_sweep_never_started_are_rows(tmp_path, capsys):
    """A 6-job sweep killed after 3 was "3 jobs, 0 with an error": the plan in multirun.yaml names the rest."""
    sweep = tmp_path / "sweep"
    plan = {"hydra": {"sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
                                  "params": None},
                      "overrides": {"task": ["proposer=draft,none", "max_new_tokens=4,8,16"]}}}
    sweep.mkdir()
    OmegaConf.save(OmegaConf.create(plan), sweep / "multirun.yaml")
    for n, job in enumerate([["proposer=draft", "max_new_tokens=4"], ["proposer=draft", "max_new_tokens=8"],
                             ["proposer=draft", "max_new_tokens=16"]]):
        fake_job(sweep / str(n), job, json.dumps({"speedup": 1.0, "overrides": job}))
    rows = collect(sweep)
    missing = [(r["proposer"], r["max_new_tokens"]) for r in rows if r.get("error", "").startswith("never started")]
    assert missing == [("none", 4), ("none", 8), ("none", 16)] and len(rows) == 6
    assert "6 jobs, 0 with an error, 3 never started" in report(sweep)


def test_a_result_written_by_another_job_is_named(tmp_path):
    """Two runs sharing a folder used to leave one's figures under the other's overrides."""
    fake_job(tmp_path / "0", ["proposer=none"], json.dumps({"speedup": 2.0, "overrides": ["proposer=draft"]}))
    (row,) = collect(tmp_path)
    assert "written by a job with the overrides ['proposer=draft']" in row["error"]

