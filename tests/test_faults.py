"""Fault injection: real processes killed mid-save, mid-record and mid-sweep, torn files, runs side by side.

A child process runs the real entry point with torch.save and safetensors' save_file wrapped: at the Nth save
the file is written, cut to half its bytes (what a kill in the middle of the write leaves) and the process
SIGKILLs itself. Then the same command runs again and must finish, with nothing lost: training ends with the
weights an uninterrupted run ends with; compare and sweeps end with every cell. The default run keeps one
representative (Medusa training killed mid-save); -m slow runs the rest.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

DIE_AT_SAVE = """
import os, signal
import safetensors.torch, torch
torch.set_num_threads(1)
_saves = [0]
def _dying(save):
    def wrapper(obj, path, *args, **kwargs):
        _saves[0] += 1
        out = save(obj, path, *args, **kwargs)
        if _saves[0] == int(os.environ["DIE_AT_SAVE"]):
            data = open(path, "rb").read()
            open(path, "wb").write(data[: len(data) // 2])  # what a kill mid-write leaves
            os.kill(os.getpid(), signal.SIGKILL)
        return out
    return wrapper
torch.save = _dying(torch.save)
safetensors.torch.save_file = _dying(safetensors.torch.save_file)
"""


def run_child(body: str, die_at_save: int | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "DIE_AT_SAVE": str(die_at_save or 0)}
    code = (DIE_AT_SAVE if die_at_save else "import torch\ntorch.set_num_threads(1)\n") + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


MEDUSA = """
import torch
from framework.lm.models import tiny_random_model
from proposers.medusa.training import MedusaTrainConfig, train_heads
target = tiny_random_model("llama", vocab_size=32, hidden_size=32, num_layers=1, max_positions=64, seed=0, init_std=0.3)
from framework.data.token_data import TokenData
stream = TokenData(torch.arange(2000) % 7, torch.ones(2000, dtype=torch.bool), "test")
streams = {"train": stream, "valid": stream, "heldout": stream}
cfg = MedusaTrainConfig(num_heads=2, steps=6, batch_size=2, block_size=16, lr=1e-2, warmup=1, eval_every=100,
                        eval_tokens=64, save_every=1, device="cpu")
train_heads(target, streams, OUT, cfg)
"""


def killed_then_resumed(body: str, tmp_path: Path, die_at_save: int) -> tuple[Path, Path]:
    """`body` (writing to OUT) killed at its Nth save, then run again to the end; and run uninterrupted. Only the
    killed run needs a process of its own: the rerun reads nothing but the folder the kill left, so it and the
    uninterrupted run go here (each a process start less: ~3 s of imports). Returns the two output folders."""
    killed_dir, clean_dir = tmp_path / "killed", tmp_path / "clean"
    killed = run_child(body.replace("OUT", repr(str(killed_dir))), die_at_save)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    exec(body.replace("OUT", repr(str(killed_dir))), {})
    exec(body.replace("OUT", repr(str(clean_dir))), {})
    return killed_dir, clean_dir


def assert_same_checkpoint(killed_dir: Path, clean_dir: Path, models: str) -> None:
    """The same steps logged and the same weights (every tensor of the `models` entry, nested one level or not)."""
    killed, clean = (torch.load(folder / "checkpoint.pt", weights_only=False) for folder in (killed_dir, clean_dir))
    assert [row["step"] for row in killed["log"]] == [row["step"] for row in clean["log"]]
    flat = lambda state: {f"{k}.{n}": t for k, v in state.items() for n, t in v.items()} if all(  # noqa: E731
        isinstance(v, dict) for v in state.values()) else state
    got, want = flat(killed[models]), flat(clean[models])
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.parametrize("die_at_save", [3] + [pytest.param(n, marks=pytest.mark.slow) for n in (1, 6)])
def test_medusa_training_killed_mid_save_resumes_to_the_same_heads(tmp_path, die_at_save):
    """Saved in place, a kill mid-save left a torn checkpoint.pt: all progress lost, every rerun crashed."""
    assert_same_checkpoint(*killed_then_resumed(MEDUSA, tmp_path, die_at_save), "trained")


EAGLE = """
import torch
from framework.lm.models import tiny_random_model
from proposers.eagle.head import random_head
from proposers.eagle.training import EagleTrainConfig, train_head
target = tiny_random_model("llama", vocab_size=32, hidden_size=32, num_layers=2, max_positions=64, seed=0, init_std=0.3)
head = random_head(hidden_size=32, vocab_size=32, target_num_layers=2, seed=1)
from framework.data.token_data import TokenData
stream = TokenData(torch.arange(2000) % 7, torch.ones(2000, dtype=torch.bool), "test")
streams = {"train": stream, "valid": stream, "heldout": stream}
cfg = EagleTrainConfig(steps=5, batch_size=2, block_size=16, lr=1e-2, warmup=1, eval_every=100, eval_tokens=64,
                       save_every=1, device="cpu")
train_head(target, {"kl": head}, streams, OUT, cfg)
"""


@pytest.mark.slow
@pytest.mark.parametrize("die_at_save", [2, 5])
def test_eagle_training_killed_mid_save_resumes_to_the_same_head(tmp_path, die_at_save):
    assert_same_checkpoint(*killed_then_resumed(EAGLE, tmp_path, die_at_save), "trained")


ZOO = """
import sysconfig, torch
from pathlib import Path
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.models import llama_config
from framework.zoo.tokenizer import train_tokenizer
from framework.zoo.train import TrainConfig, train
from framework.data.sources import Document, tokenize_splits
root = Path(sysconfig.get_paths()["stdlib"])
paths = [p for p in stdlib_files()
         if p.relative_to(root).parts[0] in ("textwrap.py", "string.py", "bisect.py", "heapq.py")]
corpus = build_corpus(paths, heldout_fraction=0.3, root=root)
tokenizer = train_tokenizer(corpus["train"]["text"], vocab_size=300)
class Rows:
    def documents(self):
        return (Document(key=r["path"], text=r["text"]) for s in ("train", "heldout") for r in corpus[s])
    def describe(self):
        return {"kind": "rows"}
streams = tokenize_splits(Rows(), tokenizer, heldout_fraction=0.3, valid_every=3)
config = lambda vocab: llama_config(vocab, num_layers=1, hidden_size=16, num_heads=2, num_kv_heads=1,
                                    intermediate_size=32, max_positions=64)
cfg = TrainConfig(steps=4, batch_size=2, block_size=16, warmup=1, eval_every=2, eval_tokens=64, save_every=1,
                  keep_checkpoints=2, bf16=False, device="cpu")
print(train(config, tokenizer, streams, OUT, cfg))
"""


@pytest.mark.slow
# the model's weights or the trainer state, of a checkpoint or of best/
@pytest.mark.parametrize("die_at_save", [1, 2, 4, 7])
def test_zoo_training_killed_mid_save_resumes_to_the_same_model(tmp_path, die_at_save):
    """It treated the existence of trainer_state.pt as a complete checkpoint and resumed from a torn one."""
    from safetensors.torch import load_file

    killed_dir, clean_dir = killed_then_resumed(ZOO, tmp_path, die_at_save)
    for part in ("final", "checkpoints/step_0000004"):
        killed, clean = (load_file(folder / part / "model.safetensors") for folder in (killed_dir, clean_dir))
        assert killed.keys() == clean.keys() and all(torch.equal(killed[k], clean[k]) for k in clean), part
    leftovers = [p.name for p in (tmp_path / "killed" / "checkpoints").iterdir()]
    assert sorted(leftovers) == ["step_0000003", "step_0000004"], leftovers  # no temporary or torn folder left


def test_a_torn_token_data_file_is_made_again(tmp_path):
    """A torn tokens.pt was taken as complete (its existence was the test): every later step crashed."""
    from framework.data.sources import TextFiles, cached_splits
    from framework.zoo.tokenizer import train_tokenizer

    texts = tmp_path / "texts"
    texts.mkdir()
    for i in range(30):
        (texts / f"doc{i:02d}.txt").write_text(f"def f{i}(x):\n    return x + {i}\n")
    tokenizer = train_tokenizer([p.read_text() for p in texts.iterdir()], vocab_size=300)
    source = TextFiles(paths=[str(texts)])
    made = cached_splits(source, tokenizer, tmp_path / "root", heldout_fraction=0.3, valid_every=3)
    (path,) = (tmp_path / "root" / "data").glob("*.pt")
    path.write_bytes(path.read_bytes()[:100])  # torn
    with pytest.warns(UserWarning, match="could not be loaded"):
        again = cached_splits(source, tokenizer, tmp_path / "root", heldout_fraction=0.3, valid_every=3)
    assert all(torch.equal(again[k].ids, made[k].ids) for k in made)
    assert torch.load(path, weights_only=False)["train"]["ids"].shape == made["train"].ids.shape  # whole again
    assert path.with_name(path.name + ".unreadable").exists()


COMPARE = """
from hydra import compose, initialize_config_dir
from experiments import compare
with initialize_config_dir(config_dir=str(__import__("pathlib").Path("conf").resolve()), version_base="1.3"):
    cfg = compose(config_name="compare", overrides=["models=tiny", "experiment.prompts=[[1,2,3,4,5],[7,7,8,9]]",
                  "experiment.max_new_tokens=4", "experiment.methods=[draft,prompt_lookup]",
                  "experiment.samplings=[greedy]", "output_dir=" + OUT])
compare.run(cfg)
"""

DIE_AT_RECORD = """
import os, signal
from framework.core import files
_records = [0]
_append = files.append_line
def _dying(path, line):
    _records[0] += 1
    if _records[0] == int(os.environ["DIE_AT_RECORD"]):
        with open(path, "a") as f:
            f.write(line[: len(line) // 2])  # half a record, then the kill
        os.kill(os.getpid(), signal.SIGKILL)
    _append(path, line)
files.append_line = _dying
"""


@pytest.mark.slow
@pytest.mark.parametrize("die_at_record", [2, 4])
def test_compare_killed_mid_record_reruns_to_every_cell(tmp_path, die_at_record):
    """A half-written last line of records.jsonl crashed the rerun."""
    body = DIE_AT_RECORD + COMPARE.replace("OUT", repr(str(tmp_path)))
    killed = subprocess.run([sys.executable, "-c", body], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "DIE_AT_RECORD": str(die_at_record)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    rerun = run_child(COMPARE.replace("OUT", repr(str(tmp_path))))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "last line was cut off" in rerun.stderr
    runs = [json.loads(line)["id"] for line in (tmp_path / "records.jsonl").read_text().splitlines()
            if line.startswith('{"id": "run/')]
    assert sorted(set(runs)) == sorted(f"run/{m}/greedy/prompts/{i}" for m in ("draft", "prompt_lookup")
                                       for i in (0, 1))
    assert len(runs) == len(set(runs))  # a finished cell is never run twice


def start_run(folder: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "experiments.run", "models=tiny", "proposer=draft",
                             "prompt=[1,2,3]", "experiment.warmup=0", "experiment.repeats=1", *overrides],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_runs_started_together_keep_both_results(tmp_path):
    """Started in the same second they shared the dated folder: both exited 0, one result was gone."""
    runs = [start_run(tmp_path, f"max_new_tokens={n}") for n in (4, 5)]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()[-2000:]
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("outputs/*/*/result.json"))]
    assert sorted(len(r["tokens"]) for r in results) == [4, 5]


@pytest.mark.slow
def test_a_sweep_killed_midway_shows_the_jobs_it_never_started(tmp_path):
    from experiments.sweep_merge import collect

    sweep = tmp_path / "sweep"
    child = subprocess.Popen([sys.executable, "-m", "experiments.run", "-m", "models=tiny", "proposer=draft",
                              "prompt=[1,2,3]", "experiment.warmup=0", "experiment.repeats=1",
                              "max_new_tokens=4,5,6,7,8,9", f"hydra.sweep.dir={sweep}"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in child.stdout:  # Hydra announces each job as it starts it: kill while the third runs
        if "#2 :" in line:
            child.kill()
            break
    child.wait()
    rows = collect(sweep)
    assert len(rows) == 6
    assert sum("error" not in r for r in rows) >= 2
    assert all(r["error"].startswith(("never started", "no result.json")) for r in rows if "error" in r)
