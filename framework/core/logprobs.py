"""Each emitted token's log-probability under the law it was emitted by, and the top alternatives there.

The law is the processed target law plain sampling draws from at that position (framework/core/sampling.py),
computed along the token's own path: a token accepted from the tree, a recovered one and the bonus all read the
target's law at their parent, never the draft's q or the residual. Greedy's law is a point mass (log-probs
0 and -inf, which say nothing), so there the law at temperature 1 is reported, after the same logit bias,
penalty and constraint mask (vLLM's processed log-probs): the emitted token is its first argmax.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from framework.core.sampling import SamplingConfig


@dataclass
class TokenLogprobs:
    chosen: torch.Tensor  # [B, K] log-probability of each emitted token (0 where there is none: token -1)
    top_ids: torch.Tensor  # [B, K, n] the n most likely tokens there, most likely first
    top: torch.Tensor  # [B, K, n] their log-probabilities


def reported_sampling(cfg: SamplingConfig) -> SamplingConfig:
    """The law log-probs are reported under: the sampling law itself, or greedy's at temperature 1."""
    return replace(cfg, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) if cfg.greedy else cfg


def token_logprobs(laws: torch.Tensor, tokens: torch.Tensor, top: int) -> TokenLogprobs:
    """laws [B, K, V] at each emitted position, tokens [B, K] (-1 padded) -> their log-probabilities."""
    logs = laws.double().log()  # log 0 = -inf: a law's zeros stay impossible, never NaN
    chosen = logs.gather(2, tokens.clamp_min(0).to(logs.device)[..., None]).squeeze(2)
    chosen = torch.where(tokens.to(logs.device) >= 0, chosen, 0.0)
    values, ids = logs.topk(min(top, logs.shape[-1]), dim=-1)
    return TokenLogprobs(chosen.cpu(), ids.cpu(), values.cpu())
