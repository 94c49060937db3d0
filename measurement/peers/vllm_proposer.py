"""Speculum's prompt lookup inside vLLM, through its custom-proposer hook:

    speculative_config={"method": "custom_class", "model": "measurement.peers.vllm_proposer.PromptLookup",
                        "num_speculative_tokens": k}

Imported by vLLM's model runner in vLLM's environment (experiments.peers.setup installs Speculum there without
dependencies). vLLM builds the class with its VllmConfig only, so the rule's own settings (max_ngram, min_ngram)
come from the SPECULUM_VLLM_PROPOSER variable (YAML) that measurement.peers.rows sets for the worker.

vLLM verifies a proposal without draft probabilities as a point draft (q one-hot on the token): exact, as our point
rule is. The candidates are PromptLookupProposer's (proposers.ngram.match.batched_continuations: the longest n-gram,
its most recent occurrence), one chain per request, k tokens at most.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import yaml

from proposers.ngram.match import batched_continuations, check_ngram_range

SETTINGS = "SPECULUM_VLLM_PROPOSER"


class PromptLookup:
    def __init__(self, vllm_config):
        settings = yaml.safe_load(os.environ.get(SETTINGS) or "{}") or {}
        self.max_ngram, self.min_ngram = int(settings.get("max_ngram", 3)), int(settings.get("min_ngram", 2))
        check_ngram_range(self.min_ngram, self.max_ngram)
        self.k = vllm_config.speculative_config.num_speculative_tokens
        self.max_model_len = vllm_config.model_config.max_model_len

    def load_model(self, *args, **kwargs) -> None:
        pass  # model-free

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings=None) -> list[list[int]]:
        """Per request of the batch: its draft chain (empty: no match, or a request that sampled nothing this
        step). token_ids_cpu [max_reqs, max_model_len] holds each request's tokens, num_tokens_no_spec the count."""
        rows = [i for i, ids in enumerate(sampled_token_ids) if ids and num_tokens_no_spec[i] < self.max_model_len]
        drafts: list[list[int]] = [[] for _ in sampled_token_ids]
        if not rows:
            return drafts
        lengths = torch.as_tensor(np.asarray(num_tokens_no_spec)[rows], dtype=torch.long)  # [R]
        tokens = torch.as_tensor(token_ids_cpu[rows, : int(lengths.max())], dtype=torch.long)  # [R, C]
        paths = batched_continuations(tokens, lengths, self.min_ngram, self.max_ngram, self.k, 1)
        room = (self.max_model_len - lengths).tolist()
        for row, chain, weight, left in zip(rows, paths.tokens[:, 0].tolist(), paths.weights[:, 0].tolist(), room):
            if weight > 0:
                drafts[row] = [t for t in chain if t >= 0][: max(left, 0)]
        return drafts
