"""An opt-in torch.compile of a model's forward that falls back to eager instead of failing.

The compiled callable is torch.compile's wrapper around the model (the model itself is not
changed). If compiling or running it raises, the KV slots that call wrote are rolled back, one
warning names the reason, and this and every later call run eagerly: results never depend on
whether compilation worked. On 2 CPU cores it loses (experiments/bench_compile.py: the cache's
length changes every step, so graphs are dynamic in it), hence off by default.
"""

from __future__ import annotations

import warnings
from typing import Callable

import torch


class EagerFallback:
    def __init__(self, model: torch.nn.Module, compile: bool = False, **options):
        self.model = model
        self.compiled: Callable | None = torch.compile(model, **options) if compile else None
        self.failure: str | None = None  # why the compiled path was given up, if it was

    def __call__(self, cache, **kwargs):
        if self.compiled is None:
            return self.model(cache=cache, **kwargs)
        used = [layer.used if layer.is_initialized else 0 for layer in cache.layers]
        try:
            return self.compiled(cache=cache, **kwargs)
        except Exception as error:  # any compile or run failure: eager gives the same results
            for layer, slots in zip(cache.layers, used + [0] * (len(cache.layers) - len(used))):
                if layer.is_initialized:
                    layer.truncate(slots)
            self.compiled, self.failure = None, f"{type(error).__name__}: {error}"
            warnings.warn(f"torch.compile failed, running eager from now on ({self.failure})", RuntimeWarning,
                          stacklevel=2)
            return self.model(cache=cache, **kwargs)
