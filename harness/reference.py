"""The target's law as plain transformers computes it: the harness's reference, independent of the code under test.

The loop under test turns logits into laws with framework.core.sampling and runs the model through our tree
attention. A reference computed with those would share their bugs (a top-p applied before the temperature,
a wrong attention scale), so the reference takes neither: the logits come from a copy of the model on
transformers' own SDPA attention (its eager one computes the softmax in float32, 1e-8 off a float64 law),
and the law from transformers' own logits processors, in the order its
`generate` applies them (sequence bias for logit_bias, repetition penalty, the prefix constraint for a grammar,
temperature, top-k, top-p, min-p; greedy: the first argmax). A grammar's reference is a rule written by hand
(harness/toy_grammar.py), never the grammar engine the loop runs.
"""

from __future__ import annotations

import copy
from typing import Callable

import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from framework.core.sampling import SamplingConfig

AllowedNext = Callable[[int, torch.Tensor], list[int]]  # (batch row, its sequence) -> the tokens allowed next


def hf_processors(cfg: SamplingConfig, allowed_next: AllowedNext | None = None) -> LogitsProcessorList:
    """transformers' processors for `cfg` (and a constraint's rule), in generate's order (temperature left out
    when greedy)."""
    processors = LogitsProcessorList()
    if cfg.logit_bias:
        processors.append(SequenceBiasLogitsProcessor({(token,): bias for token, bias in cfg.logit_bias}))
    if cfg.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(cfg.repetition_penalty))
    if allowed_next is not None:
        processors.append(PrefixConstrainedLogitsProcessor(allowed_next, num_beams=1))
    if cfg.greedy:
        return processors
    if cfg.temperature != 1.0:
        processors.append(TemperatureLogitsWarper(cfg.temperature))
    if cfg.top_k:
        processors.append(TopKLogitsWarper(cfg.top_k))
    if cfg.top_p < 1.0:
        processors.append(TopPLogitsWarper(cfg.top_p))
    if cfg.min_p > 0.0:
        processors.append(MinPLogitsWarper(cfg.min_p))
    return processors


def reference_law(logits: torch.Tensor, cfg: SamplingConfig, sequences: torch.Tensor,
                  allowed_next: AllowedNext | None = None) -> torch.Tensor:
    """logits [B, V] after sequences [B, L] (the prompt and what followed: the penalty's history) -> [B, V]."""
    scores = hf_processors(cfg, allowed_next)(sequences, logits.double())
    if cfg.greedy:
        return torch.nn.functional.one_hot(scores.argmax(-1), scores.shape[-1]).double()
    return torch.softmax(scores, -1)


def own_attention_copy(model):
    """A copy of `model` on transformers' own SDPA attention (eager where the stack has no SDPA: GPT-OSS's sinks):
    whatever attention the loop switched the model to (ours: the registered tree attention), the reference's
    logits do not go through it."""
    reference = copy.deepcopy(model)
    reference.set_attn_implementation("sdpa" if reference._supports_sdpa else "eager")
    return reference.eval()
