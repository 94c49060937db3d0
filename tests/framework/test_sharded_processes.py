"""Tensor parallelism in two gloo processes (torchrun, CPU): the loop on a sharded target gives one process's
tokens and the target's exact law; ranks that part, and bad settings, are named (experiments/sharded_check.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def torchrun(tmp_path: Path, *args: str, processes: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """`torchrun --standalone` (a free port: parallel tests never share one) from tmp_path, one thread per rank;
    the Triton kernel in its interpreter."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}", *args]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def sharded_check(tmp_path: Path, *overrides: str) -> dict[str, dict]:
    done = torchrun(tmp_path, "-m", "experiments.sharded_check", f"hydra.run.dir={tmp_path / 'check'}", *overrides)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "check" / "result.json").read_text())
    assert result["processes"] == 2
    return {r["check"]: r for r in result["results"]}


@pytest.mark.slow  # two torchrun ranks take both cores for ~17 s: the default tier keeps under 3 minutes
def test_two_processes_decode_and_keep_the_law_as_one(tmp_path):
    """EAGLE-1 calls the sharded target's lm_head (a collective) from its head; the goodput policy plans from
    rank 0's clock."""
    checks = sharded_check(tmp_path, "methods=[self_draft,eagle]", "laws=[chain2-iid-T1]")
    assert set(checks) == {
        "greedy self_draft", "greedy eagle", "greedy self_draft under policy=goodput",
        "greedy self_draft on the reference tree attention", "exact law chain2-iid-T1",
        "planted CropInsteadOfGather caught (tree3x1-point-T1)", "ranks that part stop, named",
        "a draft over another vocabulary, named", "2 processes for 3 heads, named"}
    assert all(c["passed"] for c in checks.values()), checks
    assert "ranks disagree" in checks["ranks that part stop, named"]["detail"]


@pytest.mark.slow
def test_every_method_and_law_under_tensor_parallelism(tmp_path):
    checks = sharded_check(tmp_path, "backends=[reference,triton]")
    assert len(checks) == 9 + 1 + 2 + 4 + 1 + 3 and all(c["passed"] for c in checks.values()), checks


def run_once(tmp_path: Path, name: str, processes: int, *overrides: str) -> dict:
    args = ["-m", "experiments.run", f"hydra.run.dir={tmp_path / name}", "sampling=greedy", "experiment.repeats=1",
            "experiment.warmup=0", *overrides]
    if processes > 1:
        done = torchrun(tmp_path, *args, "target.tp_plan=auto", processes=processes)
    else:
        done = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((tmp_path / name / "result.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("models", ["tiny", "zoo"])
def test_experiments_run_under_torchrun_matches_one_process(tmp_path, models):
    """The user's command: `torchrun --nproc-per-node 2 -m experiments.run target.tp_plan=auto`; rank 0 alone
    writes and reports."""
    sharded = run_once(tmp_path, "tp", 2, f"models={models}", "max_new_tokens=32")
    one = run_once(tmp_path, "one", 1, f"models={models}", "max_new_tokens=32")
    assert sharded["placement"] == "tp 2" and one["placement"] == "one device"
    assert sharded["tokens"] == one["tokens"] == one["plain_tokens"] == sharded["plain_tokens"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "tp"]  # no second rank's folder here
