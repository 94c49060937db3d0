"""The verifier benchmark runs end to end on a tiny setting, the Triton interpreter check included."""

import json
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir

from experiments import bench_verifier

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_bench_verifier_smoke(tmp_path):
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            args = compose(config_name="bench_verifier",
                           overrides=["total=32", "vocab=64", "check_vocab=128", "threads=1", f"json={out}"])
        assert bench_verifier.run(args)
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(out.read_text())
    assert {r["shape"] for r in rows} == {"chain-4", "tree-32", "ragged chains <= 4", "validation, chains of 4",
                                         "linked trees, 16 slots"}
    ragged = next(r for r in rows if r["shape"].startswith("ragged"))
    assert ragged["ragged_s"] > 0 and ragged["padded_s"] > 0
    triton = [r for r in rows if r.get("path", "").startswith("triton")]
    assert {(r["shape"], r["path"].split()[0], r["kind"]) for r in triton} == {
        *((shape, "triton-tree", kind) for shape in ("chain-4", "tree-32") for kind in ("point", "iid", "wor")),
        ("chain-4", "triton-chain", "point"), ("chain-4", "triton-chain", "iid")}
    assert all(r["matches_pytorch"] for r in triton)
    assert all(r["accepted"] > 0 for r in triton if r["kind"] != "point")  # the p == q rows walk to a leaf
