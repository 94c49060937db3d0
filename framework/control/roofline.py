"""A projection: a device profile built from an accelerator's published peak figures and the models' sizes.

No clock is read: a forward is the slower of moving its bytes (the weights once, every row's KV cache) at the
memory bandwidth and doing its FLOPs (2 per weight per token, attention's 4 x layers x width x context per token)
at the matrix units' rate, each at an assumed share of the datasheet's peak, plus an assumed launch cost per
kernel. The host's work (the verifier, the loop's rest, a model-free proposer's drafting) is taken as measured
on this machine. Every assumption is a field, written into the profile's notes; the profile's kind is
"projection", and so is every figure made from it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from framework.control.device_profile import DeviceProfile


@dataclass(frozen=True)
class Accelerator:
    name: str
    bandwidth: float  # bytes per second: the datasheet's peak
    flops: float  # dense 16-bit matrix FLOP/s: the datasheet's peak
    source: str  # where the two figures come from
    bandwidth_share: float = 0.8  # assumed: the share of the peak bandwidth a decoding forward achieves
    flops_share: float = 0.6  # assumed: the share of the peak FLOP/s
    launch_s: float = 5e-6  # assumed: seconds per kernel launch (no CUDA graphs)

    def __post_init__(self) -> None:
        if self.bandwidth <= 0 or self.flops <= 0 or not 0 < self.bandwidth_share <= 1 \
                or not 0 < self.flops_share <= 1 or self.launch_s < 0:
            raise ValueError(f"an accelerator needs positive peaks, shares in (0, 1] and a launch cost >= 0, "
                             f"got {self}")


@dataclass(frozen=True)
class ModelSize:
    """What a forward of a decoder moves and computes."""

    parameters: float  # weights read by every forward (an embedding table counts only through a tied LM head)
    layers: int
    width: int  # hidden size
    kv_values: int  # key and value entries per token per layer (2 x KV heads x head dim)
    bytes_per_value: int = 2  # bf16 weights and cache
    kernels_per_layer: int = 12  # assumed: launches per layer (norms, projections, rotary, attention, MLP)
    parallel: bool = False  # a drafter that drafts every level in one call (DFlash, PARD, P-EAGLE, Medusa's heads)

    def __post_init__(self) -> None:
        if self.parameters <= 0 or self.layers < 1 or self.width < 1 or self.kv_values < 1:
            raise ValueError(f"a model size needs positive counts, got {self}")


def forward_s(device: Accelerator, model: ModelSize, rows: float, context: float, tokens_per_row: float) -> float:
    """Seconds of one forward of `rows` rows, each `tokens_per_row` new tokens over a `context`-token cache."""
    tokens = rows * tokens_per_row
    moved = model.bytes_per_value * (model.parameters
                                     + rows * (context + tokens_per_row) * model.layers * model.kv_values)
    work = 2 * model.parameters * tokens + 4 * model.layers * model.width * tokens * (context + tokens_per_row)
    return (max(moved / (device.bandwidth * device.bandwidth_share), work / (device.flops * device.flops_share))
            + model.layers * model.kernels_per_layer * device.launch_s)


@dataclass(frozen=True)
class Projection:
    """A measured profile projected onto `device`: every model forward the roofline's, the target's and each
    drafter's per level, one token per row over `draft_context` tokens (a drafter None: a model-free proposer,
    whose drafting is host work and stays as measured); the verifier and the loop's rest stay as measured (host
    work)."""

    device: Accelerator
    target: ModelSize
    drafters: dict[str, ModelSize | None] = field(default_factory=dict)
    draft_context: int = 256

    def draft_s(self, drafter: ModelSize, rows: int, levels: int) -> float:
        """A step's drafting of `levels` levels: one call per level, or one call for all (a parallel drafter); a step
        that drafted nothing still made its drafter's first call (its catch-up on the tokens accepted before)."""
        if drafter.parallel:
            return forward_s(self.device, drafter, rows, self.draft_context, max(levels, 1))
        return max(levels, 1) * forward_s(self.device, drafter, rows, self.draft_context, 1)

    def of(self, measured: DeviceProfile) -> DeviceProfile:
        device, target = self.device, self.target
        forward = {B: {L: {n: forward_s(device, target, B, L, 1 + n) for n in by_n} for L, by_n in by_l.items()}
                   for B, by_l in measured.forward.items()}
        prefill, draft = {}, {}
        for method, by_batch in measured.prefill.items():
            drafter = self.drafters.get(method)
            prefill[method] = {B: {P: forward_s(device, target, B, 0, P)
                                      + (forward_s(device, drafter, B, 0, P) if drafter else 0.0)
                                   for P in by_p} for B, by_p in by_batch.items()}
        for method, by_sampling in measured.draft.items():
            if method not in self.drafters:
                raise ValueError(f"the projection onto {device.name} needs {method!r}'s drafter size in its drafters "
                                 f"(null for a model-free proposer); it has {sorted(self.drafters)}")
            drafter = self.drafters[method]
            draft[method] = by_sampling if drafter is None else {
                s: {B: {lv: self.draft_s(drafter, B, lv) for lv in by_l} for B, by_l in by_b.items()}
                for s, by_b in by_sampling.items()}
        notes = {**measured.notes, "projection": {
            "device": asdict(device), "target": asdict(target), "draft_context": self.draft_context,
            "drafters": {m: d and asdict(d) for m, d in self.drafters.items()},
            "host work": f"verifier, loop rest and model-free drafting as measured on {measured.hardware}"}}
        # no target_scale: the roofline has no cache interference, a method's forwards are the table's
        return DeviceProfile({"projected onto": device.name, "from": measured.hardware}, measured.target, forward,
                             prefill, draft, measured.verify, measured.other, kind="projection", notes=notes)
