"""The speculators round trip (docs/published.md), run against the package itself in its own environment
(`python -m experiments.peers.setup speculators`; it pins transformers <= 5.19, below ours): an EAGLE-3 head we
write in its layout loads as its Eagle3DraftModel with no missing or unexpected keys and every tensor equal, and
its own modules draft what ours draft. Skipped, with the command that builds it, where the environment is absent."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from experiments.peers.setup import PEERS
from framework.lm.models import tiny_random_model
from measurement.peers.engine import ENVIRONMENTS
from proposers.eagle.head import random_head
from proposers.eagle.training import unroll

HERE = Path(__file__).resolve().parent
PYTHON = ENVIRONMENTS / "speculators" / "bin" / "python"
pytestmark = pytest.mark.skipif(not PYTHON.is_file(), reason=f"no speculators environment at {PYTHON.parent.parent}: "
                                "build it with `python -m experiments.peers.setup speculators`")


def test_the_environment_is_the_documented_version():
    assert "speculators==0.9.0" in PEERS["speculators"]["no_deps"]  # docs/published.md names 0.9.0


def test_an_eagle3_head_we_write_loads_and_drafts_the_same_in_speculators(tmp_path):
    target = tiny_random_model("llama", vocab_size=64, hidden_size=32, num_layers=3, num_heads=4, num_kv_heads=2,
                               seed=0, init_std=0.3)
    target.save_pretrained(tmp_path / "target")  # its loader reads the verifier by path
    head = random_head(32, 64, 3, (0, 1, 2), "eagle3", 48, num_heads=4, num_kv_heads=2, intermediate_size=48,
                       seed=1).float().eval()
    head.save(tmp_path / "head", dtype=torch.float32, format="speculators",
              embedding=target.get_input_embeddings().weight, verifier=str(tmp_path / "target"))

    generator = torch.Generator().manual_seed(2)
    blocks = torch.randint(0, 64, (1, 13), generator=generator)  # [1, T]
    features = torch.randn(1, 13, 3, 32, generator=generator)  # [1, T, L, H]: the target's three layers
    with torch.no_grad():
        ours = head.draft_logits(unroll(head, target.get_input_embeddings(), features, blocks,
                                        steps=1)[0])  # [1, n, Vd]
    n = blocks.shape[1] - 1
    torch.save({"hidden_states": features[:, :n].flatten(-2), "input_ids": blocks[:, 1:],
                "position_ids": torch.arange(n)[None]}, tmp_path / "inputs.pt")
    answer = subprocess.run([str(PYTHON), str(HERE / "speculators_load.py"), str(tmp_path / "head"),
                             str(tmp_path / "inputs.pt")], capture_output=True, text=True, timeout=600)
    assert answer.returncode == 0, answer.stderr[-3000:]
    loaded = json.loads(answer.stdout.strip().splitlines()[-1])
    assert loaded["unexpected"] == [] and loaded["differ"] == [], loaded
    # what it does not find in the folder it takes from the verifier by design (its norm and head, for training)
    assert set(loaded["missing"]) <= {"verifier_norm.weight", "verifier_lm_head.weight"}, loaded
    top2 = ours.topk(2, dim=-1).values[0]
    clear = (top2[:, 0] - top2[:, 1]) > 1e-4  # positions whose argmax no rounding can flip
    assert clear.sum() >= n - 1
    assert torch.equal(torch.tensor(loaded["drafted"])[clear],
                       ours.argmax(-1)[0][clear]), (loaded["drafted"], ours.argmax(-1))
