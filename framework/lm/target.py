"""HFTarget: any Hugging Face causal LM as the target of speculative decoding (docs/design.md section 5)."""

from __future__ import annotations

import hashlib
import statistics
import time
from typing import Sequence

import torch

from framework.core.prompts import prompt_lengths
from framework.core.side_rows import SideRows, forward_mask
from framework.core.target import TargetOutput
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.core.verification import Verification
from framework.lm import tree_attention
from framework.lm.cached_lm import CachedLM
from framework.lm.sharding import RankAgreement, placement_of


class HFTarget:
    """The Target role (framework.core.target) for any Hugging Face causal LM: prefill -> forward_tree -> commit, on the
    model's own KV cache.

    backend: the tree attention: "auto" (the Triton kernel on CUDA, PyTorch SDPA
    elsewhere), "triton", "sdpa" or "reference" (forced); the model is switched to the registered
    `speculum_tree` attention. None keeps the model's own attention implementation, fed dense
    4D masks.
    hidden_layers: hidden-state layers to return with the logits (for heads: Medusa, EAGLE).
    compile: run the forward through torch.compile, eager on failure (off: on CPU it loses).
    """

    def __init__(self, model, backend: str | None = "auto", hidden_layers: tuple[int, ...] = (), compile: bool = False):
        tree_attention.use_tree_attention(model, backend)
        self.lm = CachedLM(model, hidden_layers, backend, compile)
        # Sharded across processes (tensor parallel): every rank runs this loop; the ranks' inputs are compared
        # before each collective forward and after each verification (framework/lm/sharding.py).
        self.agreement = RankAgreement.of(model, self.device)

    @property
    def vocab_size(self) -> int:
        return self.lm.vocab_size

    @property
    def device(self) -> torch.device:
        return self.lm.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm.dtype

    @property
    def model(self):
        return self.lm.model

    @property
    def tree_backend(self) -> str | None:
        return self.lm.tree_backend

    @property
    def max_positions(self) -> int | None:
        return self.lm.max_positions

    @property
    def packs_rows(self) -> bool:
        """On the tree attention, without recurrent layers: forward_tree runs a row kept from speculating as one
        position (framework/lm/packing.py)."""
        return self.lm.tree_backend is not None and not self.lm.windows.recurrent

    def room(self) -> int | None:
        """How deep a tree may still reach: its deepest node must sit inside the context in every row
        (None: the model states no limit). The one host sync it costs reads [B] lengths."""
        if self.max_positions is None:
            return None
        return self.max_positions - 1 - int(self.lm.length.max())

    def provide_hidden(self, layers: tuple[int, ...]) -> None:
        """Return these hidden-state layers with every forward from now on (a proposer's declared needs)."""
        self.lm.hidden_layers = tuple(layers)

    def prefill(self, input_ids: torch.Tensor) -> TargetOutput:
        """Run the prompts [B, L] (rows of different lengths: -1 after a shorter one, framework/core/prompts.py);
        returns the logits for each row's first new token [B, 1, V] and the requested hidden states of every
        position [B, L, layers, H] (a row's own in its first length[b] rows). Each row sees its own prompt only, at
        positions 0.., as alone: its padding comes after it, so no prompt token sees any, and its slots are dropped."""
        B, L = input_ids.shape
        if self.agreement is not None:
            self.agreement.check("the prompt", input_ids)
        self.lm.reset(B)
        lengths = prompt_lengths(input_ids)
        ragged = bool((lengths != L).any())
        last, at = torch.unique(lengths - 1, return_inverse=True)  # the positions whose logits are needed
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        # a recurrent layer records each position's state only when a row keeps less than the whole forward
        out = self.lm.forward(input_ids.clamp_min(0), torch.arange(L), causal, logits_rows=last.cpu(), all_hidden=True,
                              keeps_all=not ragged)
        self.lm.keep(torch.arange(L).expand(B, L), lengths)
        logits = out.logits[torch.arange(B, device=out.logits.device), at.to(out.logits.device)]  # [B, V]
        return TargetOutput(logits[:, None], out.hidden)

    def forward_tree(self, root: torch.Tensor, tree: CandidateTree, side: SideRows | None = None,
                     speculating: torch.Tensor | None = None) -> TargetOutput:
        """The root [B] (the last emitted token, not yet in the cache) plus N nodes (plus a proposer's
        side rows after them) in one forward; position = committed length + depth. The side rows' KV
        sits in pending slots that commit drops. speculating [B] bool: rows whose nodes are read (None: all);
        the others' roots run alone, packed (framework/lm/packing.py): a row kept from speculating costs one
        position, and its nodes' logits are zeros."""
        parts = [root[:, None], tree.tokens.to(root.device)]
        depth = [torch.zeros(1, dtype=torch.long), tree.depth()]
        if side is not None:
            parts.append(side.tokens.to(root.device))
            depth.append(side.depth.cpu())
        if self.agreement is not None:
            self.agreement.check("a tree (its tokens, shape and the rows' lengths)", *parts, tree.parents,
                                 self.lm.length)
        real = None  # [B, 1+N+S]: the root, the nodes of rows that speculate, side rows (unless they read the nodes)
        if speculating is not None and tree.num_nodes and (side is None or not bool(side.sees_tree[:, 1:].any())):
            rows = speculating.to(root.device)[:, None]
            real = torch.cat([torch.ones_like(rows), rows.expand(-1, tree.num_nodes),
                              torch.ones_like(rows).expand(-1, 0 if side is None else side.num_rows)], dim=1)
        out = self.lm.forward(torch.cat(parts, dim=1), torch.cat(depth), forward_mask(tree.ancestor_mask(), side),
                              real=real)
        T = tree.num_nodes + 1
        hidden = None if out.hidden is None else out.hidden[:, :T]
        side_logits = out.logits[:, T:] if side is not None else None
        return TargetOutput(out.logits[:, :T], hidden, side_logits)

    def commit(self, result: Verification) -> None:
        """Keep the root and the accepted nodes' KV (result.path [B, depth], node indices) per row."""
        if self.agreement is not None:
            self.agreement.check("a verification (its tokens and path)", result.tokens, result.path,
                                 result.num_accepted)
        self.lm.keep_path(result.path, result.num_accepted)

    def select(self, rows: torch.Tensor) -> None:
        """Keep the batch rows `rows` [B'] (repeats: copies of one prefill; fewer: finished rows leave)."""
        self.lm.select(rows)

    def join(self, other: HFTarget) -> None:
        """Append the rows of `other` (newcomers prefilled apart on the same model) after this batch's."""
        if other.lm.model is not self.lm.model:
            raise ValueError("a batch joins newcomers prefilled on the same target model only")
        self.lm.join(other.lm)

    def cost_key(self) -> str:
        """What a measured forward cost holds for: this architecture and configuration, dtype, device and
        placement, attention back end and thread count (not the weights' values: they change no cost)."""
        model = self.lm.model
        config = hashlib.sha256(model.config.to_json_string(use_diff=False).encode()).hexdigest()[:16]
        device = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else self.device.type
        return (f"{type(model).__name__}/{config}/{self.dtype}/{device}/{placement_of(model)}/"
                f"{model.config._attn_implementation}/{torch.get_num_threads()}")

    @torch.no_grad()
    def forward_costs(self, sizes: Sequence[int], repeats: int = 3) -> dict[int, float]:
        """Seconds per forward_tree of n nodes (prefixes of a breadth-first binary tree) at the current
        batch and context, the cache left as it was: the median of `repeats` after one warm-up round,
        sizes interleaved call by call so that a noisy machine slows them alike."""
        binary = TreeShape.full(2, 7).parents  # 254 nodes: any prefix is a tree
        if max(sizes) > binary.numel():
            raise ValueError(f"forward costs are measured up to {binary.numel()} nodes, asked for {max(sizes)}")
        B = int(self.lm.length.shape[0])
        root = torch.zeros(B, dtype=torch.long, device=self.device)
        trees = {n: CandidateTree(torch.zeros(B, n, dtype=torch.long, device=self.device), binary[:n]) for n in sizes}
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for rep in range(repeats + 1):
            for n, tree in trees.items():
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                start = time.perf_counter()
                self.forward_tree(root, tree)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                if rep:
                    times[n].append(time.perf_counter() - start)
                self.lm.drop_pending()
        medians = {n: statistics.median(t) for n, t in times.items()}
        if self.agreement is not None:  # every rank must decide from the same table: rank 0's
            medians = dict(zip(medians, self.agreement.from_rank_zero(list(medians.values()))))
        return medians
