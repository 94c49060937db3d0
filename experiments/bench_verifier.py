"""Benchmark: batched verifications per second of the lossless verifier on CPU.

    python -m experiments.bench_verifier                     # V = 8192, 1e5 verifications per setting
    python -m experiments.bench_verifier --total 20000 --threads 1 --json bench.json

Settings: a chain of 4 and a 32-node binary tree, each with "point" and "iid" children.
Inputs are one prebuilt batch per shape (p and q: softmax of random logits, scale 3, float32),
verified again and again until --total verifications are done (the last call takes a slice).
Timing uses validate=False, as an engine would; the chain/iid setting is also timed with
validate=True and the ratio (with / without) is printed as a side figure.

Then ragged chains (verifiers.adapters.ragged_chains: the flat fields walked where they lie) against
verify on the same rows already padded to one shape: the cost of raggedness (goal <= 1.2x).

Then the Triton chain path (verifiers/triton_chain.py) on a small batch under the Triton
interpreter (TRITON_INTERPRET=1, set here if unset): a correctness check only (its tokens
against the PyTorch verifier's on the same injected uniforms); the interpreter runs each
program in Python, so its time is no speed figure. --no-triton skips it.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from framework import CandidateTree, ReplaySource
from verifiers import verify

LOGIT_SCALE = 3.0
CHAIN_LEN = 4
TREE_NODES = 32
# (shape name, parents [N], batch size): batches keep p and q together under ~1.4 GB.
SHAPES = [
    ("chain-4", torch.arange(-1, CHAIN_LEN - 1), 4096),
    # First 32 nodes of a full binary tree in breadth-first order: depths 1..5, root's children -1.
    ("tree-32", torch.arange(TREE_NODES) // 2 - 1, 512),
]
KINDS = ("point", "iid")


def random_law(shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """softmax of scale-3 Gaussian logits, float32.  # shape [..., V]"""
    return torch.softmax(torch.randn(shape, generator=gen) * LOGIT_SCALE, dim=-1)


def make_inputs(parents: torch.Tensor, batch: int, vocab: int, gen: torch.Generator):
    """Target p, draft q and tokens drawn from q at each node's parent row (valid for iid)."""
    n = parents.numel()
    p = random_law((batch, n + 1, vocab), gen)  # [B, N+1, V]
    q = random_law((batch, n + 1, vocab), gen)  # [B, N+1, V]
    parent_rows = q[:, parents + 1].reshape(batch * n, vocab)  # [B*N, V]
    tokens = torch.multinomial(parent_rows, 1, generator=gen).view(batch, n)  # [B, N]
    return p, q, tokens


def build_tree(kind: str, tokens, parents, q) -> CandidateTree:
    if kind == "point":
        return CandidateTree.from_parents(tokens, parents, draft_probs=None, kind="point")
    return CandidateTree.from_parents(tokens, parents, draft_probs=q, kind=kind)


def time_setting(kind, parents, p, q, tokens, total, validate, gen) -> float:
    """Seconds to run `total` verifications in batches of p.shape[0], after one warm-up call."""
    batch = p.shape[0]
    full = build_tree(kind, tokens, parents, q)
    rest = total % batch
    last = build_tree(kind, tokens[:rest], parents, q[:rest]) if rest else None  # views, no copy
    verify(full, p, generator=gen, validate=validate)  # warm-up
    start = time.perf_counter()
    for _ in range(total // batch):
        verify(full, p, generator=gen, validate=validate)
    if last is not None:
        verify(last, p[:rest], generator=gen, validate=validate)
    return time.perf_counter() - start


def read_once_seconds(p: torch.Tensor, total: int) -> float:
    """Seconds to read p once per verification (p.sum()): the memory-bound floor, same run."""
    p.sum()
    start = time.perf_counter()
    for _ in range(max(1, total // p.shape[0])):
        p.sum()
    return (time.perf_counter() - start) * total / (max(1, total // p.shape[0]) * p.shape[0])


def result(shape, kind, batch, nodes, vocab, total, seconds, validate, floor) -> dict:
    return {
        "shape": shape, "kind": kind, "batch": batch, "nodes": nodes, "vocab": vocab,
        "total": total, "validate": validate, "seconds": seconds,
        "verifications_per_s": total / seconds, "us_per_verification": seconds / total * 1e6,
        "x_read_p_once": seconds / floor,
    }


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| shape | kind | batch | verifications/s | µs per verification | time / one read of p |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['kind']} | {r['batch']} | "
            f"{r['verifications_per_s']:,.0f} | {r['us_per_verification']:.2f} | {r['x_read_p_once']:.1f}x |"
        )
    return "\n".join(lines)


def ragged_check(vocab: int, gen: torch.Generator, requests: int = 1024, max_drafts: int = CHAIN_LEN,
                 repeats: int = 20) -> dict:
    """verifiers.adapters.ragged_chains (flat ragged fields, walked in place) against
    `verify` on the already padded rows, same requests (k drafts uniform in 0..max_drafts, iid)."""
    from verifiers.adapters import padded_chains, ragged_chains

    counts = torch.randint(0, max_drafts + 1, (requests,), generator=gen)
    T = int(counts.sum())
    q, p = random_law((T, vocab), gen), random_law((T, vocab), gen)
    drafts = torch.multinomial(q, 1, generator=gen).flatten()
    bonus = torch.randint(0, vocab, (requests, 1), generator=gen)
    tree, padded_p = padded_chains(drafts, counts, q, p, bonus)

    def best(call) -> float:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    ragged = best(lambda: ragged_chains(drafts, counts, q, p, bonus, validate=False))
    padded = best(lambda: verify(tree, padded_p, validate=False))
    return {"shape": f"ragged chains <= {max_drafts}", "kind": "iid", "batch": requests, "vocab": vocab,
            "ragged_s": ragged, "padded_s": padded, "ratio": ragged / padded}


def triton_interpreter_check(vocab: int, gen: torch.Generator, batch: int = 16) -> list[dict]:
    """The Triton chain path against the PyTorch verifier on chain-4 (point, iid), same uniforms."""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are decorated, at import
    try:
        from verifiers.triton_chain import TritonChainVerifier
    except ImportError as err:
        print(f"\nTriton path skipped: {err}")
        return []
    parents = torch.arange(-1, CHAIN_LEN - 1)
    p, q, tokens = make_inputs(parents, batch, vocab, gen)
    p[: batch // 2] = q[: batch // 2]  # half the rows p == q: iid accepts them to the bonus
    rows = []
    for kind in KINDS:
        tree = build_tree(kind, tokens, parents, q)
        draws = [torch.rand(batch, CHAIN_LEN + 1, 1, generator=gen, dtype=torch.float64),
                 torch.rand(batch, generator=gen, dtype=torch.float64)]
        timed = {}
        for name, verifier in (("triton", TritonChainVerifier()), ("pytorch", None)):
            extra = {} if verifier is None else {"verifier": verifier}
            start = time.perf_counter()
            timed[name] = verify(tree, p, rng=ReplaySource(list(draws)), validate=False, **extra)
            timed[name + "_s"] = time.perf_counter() - start
        same = torch.equal(timed["triton"].tokens, timed["pytorch"].tokens) and torch.equal(
            timed["triton"].num_accepted, timed["pytorch"].num_accepted)
        rows.append({"shape": "chain-4", "kind": kind, "batch": batch, "vocab": vocab, "path": "triton-interpreter",
                     "matches_pytorch": same, "seconds": timed["triton_s"], "pytorch_seconds": timed["pytorch_s"],
                     "accepted": int(timed["pytorch"].num_accepted.sum())})
    return rows


def triton_table(rows: list[dict]) -> str:
    lines = ["| Triton chain path (interpreter) | kind | batch | same tokens as PyTorch | accepted nodes | "
             "seconds per call (interpreter) | PyTorch seconds per call |", "|---|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['kind']} | {r['batch']} | {'yes' if r['matches_pytorch'] else 'NO'} | "
                     f"{r['accepted']} | {r['seconds']:.3f} | {r['pytorch_seconds']:.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", type=int, default=100_000, help="verifications per setting")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size V")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as a JSON list")
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton interpreter check")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, V = {args.vocab}, "
          f"{args.total} verifications per setting\n")

    gen = torch.Generator().manual_seed(0)
    rows, validated = [], None
    for shape, parents, batch in SHAPES:
        batch = min(batch, args.total)
        p, q, tokens = make_inputs(parents, batch, args.vocab, gen)
        floor = read_once_seconds(p, args.total)
        for kind in KINDS:
            seconds = time_setting(kind, parents, p, q, tokens, args.total, False, gen)
            rows.append(result(shape, kind, batch, parents.numel(), args.vocab, args.total, seconds, False, floor))
            if shape == "chain-4" and kind == "iid":
                seconds = time_setting(kind, parents, p, q, tokens, args.total, True, gen)
                validated = result(shape, kind, batch, parents.numel(), args.vocab, args.total, seconds, True, floor)
        del p, q, tokens

    print(markdown_table(rows))
    plain = next(r for r in rows if r["shape"] == "chain-4" and r["kind"] == "iid")
    ratio = validated["verifications_per_s"] / plain["verifications_per_s"]
    print(f"\nchain-4/iid with validate=True: {validated['verifications_per_s']:,.0f} verifications/s, "
          f"{ratio:.2f}x the rate without validation")
    ragged = ragged_check(args.vocab, gen, requests=min(1024, args.total))
    print(f"\nragged chains (k uniform in 0..{CHAIN_LEN}, {ragged['batch']} requests, iid): ragged_chains "
          f"{ragged['ragged_s'] * 1e3:.2f} ms, verify on the padded rows {ragged['padded_s'] * 1e3:.2f} ms: "
          f"{ragged['ratio']:.2f}x (goal <= 1.2x)")
    rows.append(ragged)
    triton_rows = [] if args.no_triton else triton_interpreter_check(args.vocab, gen)
    if triton_rows:
        print("\n" + triton_table(triton_rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows + [validated] + triton_rows, f, indent=2)
    return 0 if all(r["matches_pytorch"] for r in triton_rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
