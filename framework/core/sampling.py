"""The one place where logits become the exact law plain sampling draws from.

Order (as in Hugging Face generate): logit bias on the raw logits, repetition penalty, the constraint's
mask (a grammar: tokens it forbids get -inf), then temperature, top-k, top-p, min-p. Temperature 0 is
greedy: a one-hot on the first argmax among the tokens left.
The verifier and every proposer take their probabilities from here, so p and q are always
the processed laws, never raw logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from math import isnan

import torch

from framework.core.tree_shape import TreeShape


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    repetition_penalty: float = 1.0  # 1 = off; applied to every token already in the sequence
    # Added to the raw logits of these token ids (OpenAI's and vLLM's logit_bias); a mapping {id: bias} is
    # kept as sorted (id, bias) pairs, so the config stays hashable. -inf bans a token. (Annotated as a bare
    # tuple: OmegaConf, which Hydra turns built configs back into, takes no tuple of tuples.)
    logit_bias: tuple = ()

    def __post_init__(self) -> None:
        pairs = self.logit_bias.items() if isinstance(self.logit_bias, Mapping) else self.logit_bias
        try:
            pairs = tuple(sorted((token_id(k), float(v)) for k, v in pairs))
        except (TypeError, ValueError) as error:
            raise ValueError(f"logit_bias must map token ids (whole numbers) to numbers, got {self.logit_bias!r}: "
                             f"{error}") from None
        for token, bias in pairs:
            if token < 0 or isnan(bias) or bias == float("inf") or (abs(bias) > FLOAT32_MAX and bias != float("-inf")):
                raise ValueError(f"logit_bias: token ids must be >= 0 and biases finite in float32 (|b| <= 3.4e38) or "
                                 f"-inf, got {token}: {bias}")
        if len({token for token, _ in pairs}) != len(pairs):
            raise ValueError(f"logit_bias names a token twice: {self.logit_bias!r}")
        object.__setattr__(self, "logit_bias", pairs)
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def uses_history(self) -> bool:
        return self.repetition_penalty != 1.0


def hf_sampling(sampling: SamplingConfig) -> dict:
    """generate() kwargs for the same law. Only temperature and logit_bias (as sequence_bias, applied first
    there too) are mapped: transformers orders its warpers its own way, so top-k / top-p / min-p / penalties
    are refused rather than approximated."""
    if (sampling.top_k, sampling.top_p, sampling.min_p, sampling.repetition_penalty) != (0, 1.0, 0.0, 1.0):
        raise ValueError(f"only temperature maps to transformers' sampling here, got {sampling}")
    bias = {"sequence_bias": {(token,): value for token, value in sampling.logit_bias}} if sampling.logit_bias else {}
    if sampling.greedy:
        return {"do_sample": False, **bias}
    return {"do_sample": True, "temperature": sampling.temperature, "top_k": 0, "top_p": 1.0, **bias}


FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def token_id(key) -> int:
    """A logit_bias key as a token id: a whole number (or its digits); True, 5.5 and "a" are not ids."""
    if isinstance(key, bool) or (isinstance(key, float) and not key.is_integer()):
        raise ValueError(f"{key!r} is not a token id")
    if isinstance(key, str) and not key.strip().lstrip("-").isdigit():
        raise ValueError(f"{key!r} is not a token id")
    return int(key)


def apply_logit_bias(logits: torch.Tensor, bias: tuple[tuple[int, float], ...]) -> torch.Tensor:
    """logits [..., V] plus each (token id, bias) pair's bias at that id; a sum that overflows is named (it would
    make the law NaN)."""
    ids = [token for token, _ in bias]
    if max(ids) >= logits.shape[-1]:
        raise ValueError(f"logit_bias names token {max(ids)}, but the vocabulary has {logits.shape[-1]} tokens")
    add = torch.zeros(logits.shape[-1], dtype=logits.dtype, device=logits.device)
    add[ids] = torch.tensor([b for _, b in bias], dtype=logits.dtype, device=logits.device)
    biased = logits + add
    if bool((biased == float("inf")).any()):
        raise ValueError(f"logit_bias overflows {logits.dtype} on these logits "
                         f"(a bias of {max(b for _, b in bias):g}): give biases of at most about 1e30")
    return biased


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """Seen tokens become less likely: positive logits divided, negative ones multiplied."""
    penalised = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, penalised, logits)


def _keep_top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Mask of the smallest set of most likely tokens whose mass reaches top_p."""
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    mass_before = torch.nn.functional.pad(sorted_probs.cumsum(-1)[..., :-1], (1, 0))
    keep_sorted = mass_before < top_p
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def process_logits(
    logits: torch.Tensor, cfg: SamplingConfig, seen: torch.Tensor | None = None, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """logits [..., V] -> the exact sampling law [..., V] (same dtype, float32 at least).

    seen [..., V] bool: tokens already in each row's own sequence (for the repetition penalty).
    allowed [..., V] bool: tokens a constraint lets come next (None: all).
    """
    top = logits.amax(-1)  # one pass for both checks: a max is NaN if any entry is, -inf if all are
    if bool((torch.isnan(top) | (top == float("-inf"))).any()):
        if torch.isnan(top).any():
            raise ValueError("logits contain NaN")
        raise ValueError("every logit in a row is -inf: no token can be sampled")
    if not logits.dtype.is_floating_point or logits.element_size() < 4:
        logits = logits.float()
    if cfg.logit_bias:  # first, as in HF's generate: the penalty then scales the biased logits
        logits = apply_logit_bias(logits, cfg.logit_bias)
    if cfg.uses_history:  # the penalty keeps -inf at -inf and finite logits finite
        if seen is None:
            raise ValueError("repetition_penalty needs the tokens seen along each row's path")
        logits = apply_repetition_penalty(logits, seen, cfg.repetition_penalty)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    if cfg.logit_bias or allowed is not None:
        if bool((logits.amax(-1) == float("-inf")).any()):
            raise ValueError("no token is left in a row: the grammar and logit_bias (-inf) together forbid every token")
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(logits.dtype)
    if cfg.temperature != 1.0:
        # Shifted by each row's max first: (x - max) / T <= 0, so a tiny T cannot overflow to inf - inf = NaN
        # (it did below 1e-38); a T that underflows to 0 leaves the maxima at 0, the rest at -inf: the limit law.
        shifted = logits - logits.amax(-1, keepdim=True)
        logits = torch.where(shifted == 0, 0.0, shifted / cfg.temperature)
    if 0 < cfg.top_k < logits.shape[-1]:
        kth = logits.topk(cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if cfg.top_p < 1 or cfg.min_p > 0:
        keep = torch.ones_like(probs, dtype=torch.bool)
        if cfg.top_p < 1:
            keep &= _keep_top_p(probs, cfg.top_p)
        if cfg.min_p > 0:
            keep &= probs >= cfg.min_p * probs.amax(-1, keepdim=True)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def seen_tokens(context: torch.Tensor, vocab: int) -> torch.Tensor:
    """context [B, L] (-1 = padding, ignored) -> which ids each row holds [B, V] bool."""
    return mark_seen(torch.zeros(context.shape[0], vocab, dtype=torch.bool, device=context.device), context)


def mark_seen(seen: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """seen [B, V] plus tokens [B, K] (-1 = padding, ignored)."""
    vocab = seen.shape[-1]
    ids = torch.where(tokens >= 0, tokens, vocab)
    extended = torch.zeros(seen.shape[0], vocab + 1, dtype=torch.bool, device=seen.device).scatter_(1, ids, True)
    return seen | extended[:, :vocab]


def seen_along_tree(seen_context: torch.Tensor, tokens: torch.Tensor,
                    parents: torch.Tensor | TreeShape) -> torch.Tensor:
    """Which tokens each tree row's own sequence holds: the context's plus its path's (parents: the
    tree's parent array, or its TreeShape, whose ancestor mask is then read, not rebuilt).

    seen_context [B, V], tokens [B, N] -> seen [B, N+1, V] bool (row 0 = root = context alone).
    """
    vocab = seen_context.shape[-1]
    onehot = torch.nn.functional.one_hot(tokens, vocab).to(torch.float32)  # [B, N, V]
    shape = parents if isinstance(parents, TreeShape) else TreeShape(parents)
    anc = shape.ancestors[:, 1:].to(device=tokens.device, dtype=torch.float32)  # [N+1, N]
    seen_nodes = torch.einsum("rn,bnv->brv", anc, onehot) > 0
    return seen_nodes | seen_context[:, None, :]


def process_tree_logits(
    logits: torch.Tensor, cfg: SamplingConfig, seen_context: torch.Tensor | None, tokens: torch.Tensor,
    parents: torch.Tensor | TreeShape, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """logits [B, N+1, V] at the root and every node -> laws [B, N+1, V], each along its own path.

    seen_context [B, V]: tokens already in each row's sequence (needed for the repetition penalty).
    allowed [B, N+1, V]: the constraint's mask along each node's own path (framework/core/constraint.py).
    """
    seen = seen_along_tree(seen_context, tokens, parents) if cfg.uses_history else None
    return process_logits(logits, cfg, seen, allowed)
