"""One random source for every coin (docs/design.md section 6).

Two primitives, both batched with the batch as the leading dimension:
- uniform(shape): uniforms in [0, 1). Callers compare them with thresholds, uniform on the left
  (`u < ratio`), so the enumerating source of the harness can branch on the comparison.
- categorical(probs [..., V]): one index per row, proportional to probs (need not be normalised).
"""

from __future__ import annotations

from typing import Protocol

import torch


class RandomSource(Protocol):
    def uniform(self, shape: tuple[int, ...], device: torch.device | str = "cpu") -> torch.Tensor: ...

    def categorical(self, probs: torch.Tensor) -> torch.Tensor: ...


def law_dtype(*laws: torch.Tensor | None) -> torch.dtype:
    """The dtype laws are computed in: float64 if any is, else float32. Half precision is fine to
    store and read, not to add up or divide in."""
    return torch.float64 if any(law is not None and law.dtype == torch.float64 for law in laws) else torch.float32


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index i with cdf[i-1] <= u * total < cdf[i]; never a zero-probability index.

    probs [..., V] >= 0, u [...] in [0, 1) -> long [...]. Half-precision laws are summed in float32:
    a running sum kept in bfloat16 stops growing long before the last token (a uniform law over
    32,000 tokens reached 961 of them).
    """
    cdf = probs.cumsum(-1, dtype=law_dtype(probs))
    target = (u.to(cdf.dtype) * cdf[..., -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf.contiguous(), target.contiguous(), right=True).squeeze(-1)
    # The first index whose cdf exceeds the target has mass, unless there is none (idx == V): rounding
    # put u * total at or past the last step. Only then is the last positive entry looked for.
    V = probs.shape[-1]
    if bool((idx >= V).any()):
        last_positive = V - 1 - (probs > 0).flip(-1).to(torch.int8).argmax(-1)
        idx = torch.minimum(idx, last_positive)
    return idx


class TorchSource:
    """The default source: a torch.Generator (seeded for reproducible text)."""

    def __init__(self, generator: torch.Generator | None = None, seed: int | None = None):
        if generator is None:
            generator = torch.Generator()
            if seed is not None:
                if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
                    raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")
                generator.manual_seed(seed)
        self.generator = generator

    def _rand(self, shape: tuple[int, ...], device) -> torch.Tensor:
        # Draw where the generator lives, then move: a CPU generator can serve a CUDA run.
        out = torch.rand(shape, generator=self.generator, dtype=torch.float64, device=self.generator.device)
        return out.to(device)

    def uniform(self, shape: tuple[int, ...], device: torch.device | str = "cpu") -> torch.Tensor:
        return self._rand(tuple(shape), device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return inverse_cdf(probs, self._rand(tuple(probs.shape[:-1]), probs.device))


class ReplaySource:
    """Hands out given uniforms in order: injected draws for kernels and tests."""

    def __init__(self, uniforms: list[torch.Tensor]):
        self._queue = list(uniforms)

    def _next(self, shape: tuple[int, ...], device) -> torch.Tensor:
        if not self._queue:
            raise ValueError("ReplaySource ran out of uniforms")
        u = self._queue.pop(0)
        if tuple(u.shape) != tuple(shape):
            raise ValueError(f"ReplaySource: next uniforms have shape {tuple(u.shape)}, asked for {tuple(shape)}")
        return u.to(device)

    def uniform(self, shape: tuple[int, ...], device: torch.device | str = "cpu") -> torch.Tensor:
        return self._next(tuple(shape), device)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return inverse_cdf(probs, self._next(tuple(probs.shape[:-1]), probs.device))
