"""Two gloo processes (torchrun) train the curve one process trains with the same global batch; checkpoints are
written once; a run stopped part way resumes on the same curve."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

JOB = Path(__file__).with_name("distributed_job.py")
ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], processes: int = 1) -> None:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",  # standalone: a free port of its own
                "--nproc-per-node", str(processes)] if processes > 1 else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*launcher, str(JOB), *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def curve(out: Path) -> list[list[float]]:
    """Per step the loss parts and the global gradient norm (Adam would hide a gradient mis-scaled by the
    process count from the losses; the norm shows it), and the whole checkpoint."""
    saved = torch.load(out / "checkpoint.pt", weights_only=False)
    return [[*row["parts"], row["grad_norm"]] for row in saved["log"]], saved


@pytest.fixture(scope="module")
def one_process(chat_target, chat_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("one")
    run([str(chat_target), str(chat_files["messages"]), str(out)])
    return curve(out)


@pytest.mark.slow  # three interpreters and 40 steps: half a minute, a sixth of the default tier's budget
def test_two_processes_follow_the_one_process_curve(one_process, chat_target, chat_files, tmp_path):
    run([str(chat_target), str(chat_files["messages"]), str(tmp_path)], processes=2)
    (one, _), (two, saved) = one_process, curve(tmp_path)
    assert len(one) == len(two) == 20
    assert torch.tensor(one).sub(torch.tensor(two)).abs().max() <= 1e-4  # losses and gradient norms
    assert one[-1][0] < one[0][0] * 0.8  # and the curve learns: the KL head's depth-0 loss fell
    assert saved["processes"] == 2
    written = sorted(p.name for p in tmp_path.glob("checkpoint*"))
    assert written == ["checkpoint.prev.pt", "checkpoint.pt"]  # one writer: no per-process copies, no temporaries


@pytest.mark.slow  # the default tier resumes the same loop after a kill: tests/test_faults.py (Medusa)
def test_a_stopped_run_resumes_on_the_same_curve(one_process, chat_target, chat_files, tmp_path):
    args = [str(chat_target), str(chat_files["messages"]), str(tmp_path), "20"]
    run([*args, "0"], processes=2)  # a time limit of 0 s: stops (with a checkpoint) after the first step
    assert len(curve(tmp_path)[0]) == 1
    run(args)  # resumed in one process: the loop does not care how many ran before
    (one, _), (resumed, _) = one_process, curve(tmp_path)
    assert torch.tensor(one).sub(torch.tensor(resumed)).abs().max() <= 1e-4
