"""Benchmark: batched verifications per second of the lossless verifier, on CPU or a GPU.

    python -m experiments.bench_verifier                     # V = 8192, 1e5 verifications per setting
    python -m experiments.bench_verifier total=20000 threads=1 json=bench.json
    python -m experiments.bench_verifier device=cuda       # + the compiled Triton paths, timed

Settings: a chain of 4 and a 32-node binary tree, each with "point" and "iid" children (on a GPU
also "wor", and each setting on every path: PyTorch, the Triton tree path, the fused Triton chain
path on chains).
Inputs are one prebuilt batch per shape (p and q: softmax of random logits, scale 3, float32),
verified again and again until total verifications are done (the last call takes a slice).
Timing uses validate=False, as an engine would; the chain/iid setting is also timed with
validate=True and the ratio (with / without) is printed as a side figure.

Then ragged chains (verifiers.adapters.ragged_chains: the flat fields walked where they lie) against
verify on the same rows already padded to one shape: the cost of raggedness (goal <= 1.2x).

Then the input checks' cost beside the verification they guard, at an engine's vocabulary (check_vocab),
and trees held as sibling links (SGLang's layout) at 1,024 requests: ordering them, and the whole
linked_trees call against flat_trees on the same trees already in order.

Then the Triton paths (verifiers/triton_rules.py for trees, verifiers/triton_chain.py for chains)
on a small batch of every shape and kind: their tokens against the PyTorch verifier's on the same
injected uniforms. On CPU they run under the Triton interpreter (TRITON_INTERPRET=1, set here if
unset), which runs each program in Python: a correctness check, its time no speed figure.
no_triton skips them.
"""

from __future__ import annotations

import os
import time

import hydra
import torch
from omegaconf import DictConfig

from framework.core import files
from framework.core.randomness import ReplaySource
from framework.core.tree import CandidateTree
from framework.core.tree_shape import children_table, depths
from verifiers import LOSSLESS, verify
from verifiers.adapters import flat_trees, linked_trees, padded_chains, ragged_chains
from verifiers.links import order_links

LOGIT_SCALE = 3.0
CHAIN_LEN = 4
TREE_NODES = 32
# (shape name, parents [N], batch size): batches keep p and q together under ~1.4 GB.
SHAPES = [
    ("chain-4", torch.arange(-1, CHAIN_LEN - 1), 4096),
    # First 32 nodes of a full binary tree in breadth-first order: depths 1..5, root's children -1.
    ("tree-32", torch.arange(TREE_NODES) // 2 - 1, 512),
]
KINDS = ("point", "iid")  # the CPU table's, and the fused chain path's
KINDS_ON_GPU = ("point", "iid", "wor")  # the tree path's


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


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_setting(kind, parents, p, q, tokens, total, validate, gen, verifier=LOSSLESS) -> float:
    """Seconds to run `total` verifications in batches of p.shape[0], after one warm-up call."""
    batch = p.shape[0]
    full = build_tree(kind, tokens, parents, q)
    rest = total % batch
    last = build_tree(kind, tokens[:rest], parents, q[:rest]) if rest else None  # views, no copy
    verify(full, p, generator=gen, validate=validate, verifier=verifier)  # warm-up (and the kernels' compile)
    synchronize(p.device)
    start = time.perf_counter()
    for _ in range(total // batch):
        verify(full, p, generator=gen, validate=validate, verifier=verifier)
    if last is not None:
        verify(last, p[:rest], generator=gen, validate=validate, verifier=verifier)
    synchronize(p.device)
    return time.perf_counter() - start


def read_once_seconds(p: torch.Tensor, total: int) -> float:
    """Seconds to read p once per verification (p.sum()): the memory-bound floor, same run."""
    p.sum()
    synchronize(p.device)
    start = time.perf_counter()
    for _ in range(max(1, total // p.shape[0])):
        p.sum()
    synchronize(p.device)
    return (time.perf_counter() - start) * total / (max(1, total // p.shape[0]) * p.shape[0])


def result(shape, kind, batch, nodes, vocab, total, seconds, validate, floor, path="pytorch") -> dict:
    return {
        "shape": shape, "kind": kind, "path": path, "batch": batch, "nodes": nodes, "vocab": vocab,
        "total": total, "validate": validate, "seconds": seconds,
        "verifications_per_s": total / seconds, "us_per_verification": seconds / total * 1e6,
        "x_read_p_once": seconds / floor,
    }


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| shape | kind | path | batch | verifications/s | µs per verification | time / one read of p |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['kind']} | {r['path']} | {r['batch']} | "
            f"{r['verifications_per_s']:,.0f} | {r['us_per_verification']:.2f} | {r['x_read_p_once']:.1f}x |"
        )
    return "\n".join(lines)


def ragged_check(vocab: int, gen: torch.Generator, requests: int = 1024, max_drafts: int = CHAIN_LEN,
                 repeats: int = 20, device: torch.device = torch.device("cpu")) -> dict:
    """verifiers.adapters.ragged_chains (flat ragged fields, walked in place) against
    `verify` on the already padded rows, same requests (k drafts uniform in 0..max_drafts, iid)."""
    counts = torch.randint(0, max_drafts + 1, (requests,), generator=gen)
    T = int(counts.sum())
    q, p = random_law((T, vocab), gen), random_law((T, vocab), gen)
    drafts = torch.multinomial(q, 1, generator=gen).flatten()
    bonus = torch.randint(0, vocab, (requests, 1), generator=gen)
    counts, q, p, drafts, bonus = (x.to(device) for x in (counts, q, p, drafts, bonus))
    tree, padded_p = padded_chains(drafts, counts, q, p, bonus)

    ragged = best_of(lambda: ragged_chains(drafts, counts, q, p, bonus, validate=False), repeats, device)
    padded = best_of(lambda: verify(tree, padded_p, validate=False), repeats, device)
    return {"shape": f"ragged chains <= {max_drafts}", "kind": "iid", "batch": requests, "vocab": vocab,
            "ragged_s": ragged, "padded_s": padded, "ratio": ragged / padded}


def best_of(call, repeats: int, device: torch.device) -> float:
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def validation_check(vocab: int, gen: torch.Generator, requests: int = 16, repeats: int = 5,
                     device: torch.device = torch.device("cpu")) -> dict:
    """The input checks (validate=True) against the verification they guard, at an engine's vocabulary:
    ragged chains of CHAIN_LEN drafts, iid."""
    T = requests * CHAIN_LEN
    q, p = random_law((T, vocab), gen).to(device), random_law((T, vocab), gen).to(device)
    drafts = torch.multinomial(q.cpu(), 1, generator=gen).flatten().to(device)
    bonus = torch.randint(0, vocab, (requests, 1), generator=gen).to(device)
    counts = [CHAIN_LEN] * requests
    unchecked = best_of(lambda: ragged_chains(drafts, counts, q, p, bonus, validate=False), repeats, device)
    checked = best_of(lambda: ragged_chains(drafts, counts, q, p, bonus, validate=True), repeats, device)
    return {"shape": f"validation, chains of {CHAIN_LEN}", "kind": "iid", "batch": requests, "vocab": vocab,
            "verify_s": unchecked, "checks_s": checked - unchecked, "ratio": (checked - unchecked) / unchecked}


def links_check(vocab: int, gen: torch.Generator, requests: int = 1024, slots: int = 16, repeats: int = 5,
                device: torch.device = torch.device("cpu")) -> dict:
    """SGLang-shaped trees (sibling links, slots shuffled): putting them in order (order_links) and the
    whole linked_trees call, against flat_trees on the same trees already in parents form."""
    first_child = torch.full((requests, slots), -1, dtype=torch.long)
    next_sibling = torch.full((requests, slots), -1, dtype=torch.long)
    for b in range(requests):  # setup, not timed: a random tree per request over shuffled slots
        slot = torch.cat([torch.zeros(1, dtype=torch.long), torch.randperm(slots - 1, generator=gen) + 1]).tolist()
        last_child: dict[int, int] = {}
        for i in range(1, slots):
            parent = slot[int(torch.randint(0, i, (1,), generator=gen))]
            if parent in last_child:
                next_sibling[b, last_child[parent]] = slot[i]
            else:
                first_child[b, parent] = slot[i]
            last_child[parent] = slot[i]
    p = random_law((requests * slots, vocab), gen)
    candidates = torch.randint(0, vocab, (requests, slots), generator=gen)
    first_child, next_sibling, p, candidates = (x.to(device) for x in (first_child, next_sibling, p, candidates))
    order = order_links(first_child, next_sibling)
    node = order.slots >= 0
    rows = torch.cat([torch.zeros(requests, 1, dtype=torch.long, device=device), order.slots.clamp_min(0)], 1)
    rows = (rows + torch.arange(requests, device=device)[:, None] * slots)[
        torch.nn.functional.pad(node, (1, 0), value=True)]
    flat_p, drafts = p[rows], candidates.gather(1, order.slots.clamp_min(0))[node]
    ordering = best_of(lambda: order_links(first_child, next_sibling), repeats, device)
    linked = best_of(lambda: linked_trees(candidates, first_child, next_sibling, p, validate=False), repeats, device)
    flat = best_of(lambda: flat_trees(drafts, order.counts, order.parents[node], None, flat_p, validate=False),
                   repeats, device)
    return {"shape": f"linked trees, {slots} slots", "kind": "point", "batch": requests, "vocab": vocab,
            "order_links_s": ordering, "linked_s": linked, "flat_s": flat, "ratio": linked / flat}


def triton_paths(shape: str) -> dict:
    """The Triton verifiers for a shape: the tree path (every shape), the fused chain path (chains)."""
    from verifiers.triton_chain import TritonChainVerifier
    from verifiers.triton_rules import triton_tree_verifier

    paths = {"triton-tree": triton_tree_verifier()}
    if shape.startswith("chain"):
        paths["triton-chain"] = TritonChainVerifier()
    return paths


def same_tokens_check(vocab: int, gen: torch.Generator, device: torch.device, batch: int = 16,
                      path_note: str = "triton-interpreter") -> list[dict]:
    """Each Triton path against the PyTorch verifier, same injected uniforms, on every shape and kind."""
    rows = []
    for shape, parents, _ in SHAPES:
        p, q, tokens = (x.to(device) for x in make_inputs(parents, batch, vocab, gen))
        p[: batch // 2] = q[: batch // 2]  # half the rows p == q: iid accepts them to a leaf
        levels, width = int(depths(parents).max()), children_table(parents).shape[1]
        for name, verifier in triton_paths(shape).items():
            for kind in KINDS_ON_GPU if name == "triton-tree" else KINDS:
                tree = build_tree(kind, tokens, parents, q)
                draws = [torch.rand(batch, levels + 1, width, generator=gen, dtype=torch.float64),
                         torch.rand(batch, generator=gen, dtype=torch.float64)]
                timed = {}
                for label, v in ((name, verifier), ("pytorch", LOSSLESS)):
                    start = time.perf_counter()
                    timed[label] = verify(tree, p, rng=ReplaySource(list(draws)), validate=False, verifier=v)
                    synchronize(device)
                    timed[label + "_s"] = time.perf_counter() - start
                same = torch.equal(timed[name].tokens, timed["pytorch"].tokens)
                rows.append({"shape": shape, "kind": kind, "batch": batch, "vocab": vocab,
                             "path": f"{name} ({path_note})", "matches_pytorch": same,
                             "seconds": timed[name + "_s"], "pytorch_seconds": timed["pytorch_s"],
                             "accepted": int(timed["pytorch"].num_accepted.sum())})
    return rows


def triton_table(rows: list[dict]) -> str:
    lines = ["| shape | kind | Triton path | batch | same tokens as PyTorch | accepted nodes | "
             "seconds per call | PyTorch seconds per call |", "|---|---|---|---:|---|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['kind']} | {r['path']} | {r['batch']} | "
                     f"{'yes' if r['matches_pytorch'] else 'NO'} | "
                     f"{r['accepted']} | {r['seconds']:.3f} | {r['pytorch_seconds']:.4f} |")
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="bench_verifier", version_base="1.3")
def main(args: DictConfig) -> None:
    if not run(args):
        raise SystemExit(1)


def run(args: DictConfig) -> bool:
    """Prints the tables (and writes args.json); True when every Triton path gave the PyTorch tokens."""
    device = torch.device(args.device)
    on_gpu = device.type == "cuda"
    if on_gpu and os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("device=cuda times compiled kernels: unset TRITON_INTERPRET")
    if not on_gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when the kernels are decorated, at import
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads, V = {args.vocab}, "
          f"{args.total} verifications per setting\n")

    gen = torch.Generator().manual_seed(0)
    rows, validated = [], None
    for shape, parents, batch in SHAPES:
        batch = min(batch, args.total)
        p, q, tokens = (x.to(device) for x in make_inputs(parents, batch, args.vocab, gen))
        floor = read_once_seconds(p, args.total)
        paths = {"pytorch": LOSSLESS, **(triton_paths(shape) if on_gpu and not args.no_triton else {})}
        for name, verifier in paths.items():
            for kind in (KINDS_ON_GPU if on_gpu and name != "triton-chain" else KINDS):
                seconds = time_setting(kind, parents, p, q, tokens, args.total, False, gen, verifier)
                rows.append(result(shape, kind, batch, parents.numel(), args.vocab, args.total, seconds, False,
                                   floor, name))
        seconds = time_setting("iid", parents, p, q, tokens, args.total, True, gen) if shape == "chain-4" else None
        if seconds is not None:
            validated = result(shape, "iid", batch, parents.numel(), args.vocab, args.total, seconds, True, floor)
        del p, q, tokens

    print(markdown_table(rows))
    plain = next(r for r in rows if r["shape"] == "chain-4" and r["kind"] == "iid" and r["path"] == "pytorch")
    ratio = validated["verifications_per_s"] / plain["verifications_per_s"]
    print(f"\nchain-4/iid with validate=True: {validated['verifications_per_s']:,.0f} verifications/s, "
          f"{ratio:.2f}x the rate without validation")
    ragged = ragged_check(args.vocab, gen, requests=min(1024, args.total), device=device)
    print(f"\nragged chains (k uniform in 0..{CHAIN_LEN}, {ragged['batch']} requests, iid): ragged_chains "
          f"{ragged['ragged_s'] * 1e3:.2f} ms, verify on the padded rows {ragged['padded_s'] * 1e3:.2f} ms: "
          f"{ragged['ratio']:.2f}x (goal <= 1.2x)")
    rows.append(ragged)
    checks = validation_check(args.check_vocab, gen, device=device)
    print(f"\ninput checks at V = {args.check_vocab:,} ({checks['batch']} chains of {CHAIN_LEN}, iid): "
          f"{checks['checks_s'] * 1e3:.1f} ms beside {checks['verify_s'] * 1e3:.1f} ms of verification: "
          f"{checks['ratio']:.2f}x")
    links = links_check(args.vocab, gen, requests=min(1024, args.total), device=device)
    print(f"\nsibling links ({links['batch']} requests, 16 slots, shuffled): order_links "
          f"{links['order_links_s'] * 1e3:.2f} ms; linked_trees {links['linked_s'] * 1e3:.2f} ms, "
          f"flat_trees on the same trees in order {links['flat_s'] * 1e3:.2f} ms: {links['ratio']:.2f}x")
    rows += [checks, links]
    # On CPU the interpreter runs each program in Python: a correctness check on a small batch, no speed figure.
    triton_rows = [] if args.no_triton else same_tokens_check(args.vocab if on_gpu else min(args.vocab, 512), gen,
                                                            device, path_note="compiled" if on_gpu else "interpreter")
    if triton_rows:
        print("\n" + triton_table(triton_rows))
    if args.json:
        files.write_json(args.json, rows + [validated] + triton_rows)
    return all(r["matches_pytorch"] for r in triton_rows)


if __name__ == "__main__":
    main()
