"""The verifier benchmark runs end to end on a tiny setting, the Triton interpreter check included."""

import json

import torch

from experiments import bench_verifier


def test_bench_verifier_smoke(tmp_path):
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()
    try:
        assert bench_verifier.main(["--total", "32", "--vocab", "64", "--threads", "1", "--json", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(out.read_text())
    assert {r["shape"] for r in rows} == {"chain-4", "tree-32", "ragged chains <= 4"}
    ragged = next(r for r in rows if r["shape"].startswith("ragged"))
    assert ragged["ragged_s"] > 0 and ragged["padded_s"] > 0
    triton = [r for r in rows if r.get("path") == "triton-interpreter"]
    assert [r["kind"] for r in triton] == ["point", "iid"] and all(r["matches_pytorch"] for r in triton)
    assert triton[1]["accepted"] > 0  # the p == q rows walk to the bonus
