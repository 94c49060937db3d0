"""Targets larger than one device (docs/design.md section 16): placed by layers (`device_map`, accelerate)
or sharded by heads across processes (`tp_plan`, transformers' tensor parallelism under torchrun).

Tensor parallelism runs the whole loop on every rank (SPMD): each rank drafts, verifies and commits the same
tokens with the same coins, and only the target's forward is collective. Ranks that part (a different prompt,
seed or setting, a decision from a rank's own clock) would feed the model's collectives different shapes, which
hangs or corrupts; `RankAgreement` compares a fingerprint of every forward's input and every verification
across ranks first and stops the run with a named error instead. `RankZeroClock` gives a timing policy rank 0's
clock, so every rank takes the same decisions.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping
from dataclasses import replace

import safetensors.torch
import torch
import transformers

from framework.core.files import fresh_folder


def process_rank() -> int:
    """This process's rank under torchrun (RANK, set before Python starts), 0 otherwise."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


def launched_processes() -> int:
    """How many processes torchrun started (WORLD_SIZE), 1 outside it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def writes_results() -> bool:
    """Only rank 0 writes results: the other ranks hold copies of the same run."""
    return process_rank() == 0


def run_folder(base: str) -> str:
    """Rank 0's run folder is fresh_folder(base); another rank's is a temporary one (Hydra writes its config
    and log there; the run's results are rank 0's), so ranks never race for one name."""
    if writes_results():
        return fresh_folder(base)
    folder = tempfile.mkdtemp(prefix=f"speculum-rank{process_rank()}-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def attention_heads(config) -> tuple[int, int]:
    """(query heads, key-value heads) of a transformers config."""
    heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if heads is None:
        raise ValueError(f"{type(config).__name__} states no attention head count: tensor parallelism splits heads")
    return heads, getattr(config, "num_key_value_heads", None) or heads


def check_tensor_parallel(config, processes: int) -> None:
    """Tensor parallelism gives each rank whole heads: `processes` must divide the query and the key-value heads."""
    heads, kv_heads = attention_heads(config)
    if heads % processes or kv_heads % processes:
        fits = [n for n in range(1, heads + 1) if heads % n == 0 and kv_heads % n == 0]
        raise ValueError(f"tp_plan over {processes} processes: {processes} does not divide the target's "
                         f"{heads} attention heads and {kv_heads} key-value heads (each rank holds whole heads); "
                         f"start torchrun with --nproc-per-node in {fits}")


def check_placement(device: str, device_map, tp_plan) -> None:
    if device_map is not None and tp_plan is not None:
        raise ValueError("target.device_map and target.tp_plan both set: place the target by layers on this "
                         "process's devices (device_map) or shard it across torchrun processes (tp_plan), not both")
    if tp_plan is not None and tp_plan != "auto" and not isinstance(tp_plan, Mapping):
        raise ValueError(f"target.tp_plan={tp_plan!r}: use auto (the model's own plan) or a dict of module rules")
    if (device_map is not None or tp_plan is not None) and device != "cpu":
        raise ValueError(f"target.device={device!r} with a device_map or tp_plan: those place the target themselves")


def placement_kwargs(config, device_map, tp_plan, offload_folder: str | None) -> dict:
    """from_pretrained's arguments for a target placed by layers or sharded by heads ({} for neither)."""
    if device_map is not None:
        folder = offload_folder
        if folder is None:  # used if a layer goes to "disk"; a temporary one goes at exit
            folder = tempfile.mkdtemp(prefix="speculum-offload-")
            atexit.register(shutil.rmtree, folder, True)
        return {"device_map": dict(device_map) if isinstance(device_map, Mapping) else device_map,
                "offload_folder": folder}
    if tp_plan is None:
        return {}
    if launched_processes() > 1:
        check_tensor_parallel(config, launched_processes())
    plan = dict(tp_plan) if isinstance(tp_plan, Mapping) else tp_plan  # a Hydra DictConfig is no dict
    if hasattr(transformers, "DistributedConfig"):
        return {"distributed_config": transformers.DistributedConfig(tp_plan=plan)}
    return {"tp_plan": plan}  # transformers before DistributedConfig


def placed_copy(model, device_map=None, tp_plan=None, offload_folder: str | None = None):
    """A model built in memory (a tiny random one) placed by layers or sharded by heads: saved to a temporary
    folder and loaded back through from_pretrained, the one path on which transformers places models. The folder
    lives as long as the model (a layer offloaded to "disk" may be read from it)."""
    check_placement("cpu", device_map, tp_plan)
    folder = tempfile.mkdtemp(prefix="speculum-placed-")
    # Written by hand: under torchrun, save_pretrained writes on rank 0 only, and every rank loads its own copy.
    model.config.save_pretrained(folder)
    safetensors.torch.save_model(model, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    placed = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=model.dtype, **placement_kwargs(model.config, device_map, tp_plan, offload_folder))
    weakref.finalize(placed, shutil.rmtree, folder, True)
    return placed.eval()


class ReturnsTo(torch.nn.Module):
    """A target's layer that a head calls (its lm_head), its output brought back to `device`: under a device_map
    the layer may run on another device than the one its caller works on."""

    def __init__(self, layer: torch.nn.Module, device: torch.device):
        super().__init__()
        self.layer, self.device = layer, device

    @property
    def weight(self) -> torch.Tensor:
        return self.layer.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x).to(self.device)


def tensor_parallel_group(model):
    """The process group a tensor-parallel model's weights are sharded over (None: not sharded)."""
    for parameter in model.parameters():
        mesh = getattr(parameter, "device_mesh", None)  # DTensor weights carry their mesh
        if mesh is not None and mesh.size() > 1:
            return mesh.get_group()
    return None


def placement_of(model) -> str:
    """How the target is placed, for cost keys and records: "one device", "tp N" or "device_map a,b"."""
    group = tensor_parallel_group(model)
    if group is not None:
        return f"tp {torch.distributed.get_world_size(group)}"
    device_map = getattr(model, "hf_device_map", None)
    if device_map and len(set(map(str, device_map.values()))) > 1:
        return "device_map " + ",".join(sorted(set(map(str, device_map.values()))))
    return "one device"


def fingerprint(tensors, device: torch.device | str = "cpu") -> torch.Tensor:
    """[3] int64 of integer tensors: their element count and two position-weighted sums (wrapping), so that ranks
    holding different values, or different shapes, almost surely differ."""
    flat = torch.cat([t.reshape(-1).to(device, torch.long) for t in tensors])
    index = torch.arange(flat.numel(), dtype=torch.long, device=device)
    count = torch.full((), flat.numel(), dtype=torch.long, device=device)
    return torch.stack([count, (flat * (index + 1)).sum(), (flat * (index * 7919 % 10007 + 1)).sum()])


class RankAgreement:
    """Checks that every rank of a tensor-parallel target runs the same loop. One all-reduce of 6 integers per
    check (on a GPU, microseconds beside a sharded forward)."""

    def __init__(self, group, device: torch.device):
        self.group, self.device = group, device
        self.checks = 0

    @classmethod
    def of(cls, model, device: torch.device) -> RankAgreement | None:
        group = tensor_parallel_group(model)
        return None if group is None else cls(group, device)

    def check(self, what: str, *tensors: torch.Tensor) -> None:
        self.checks += 1
        mine = fingerprint(tensors, self.device)
        both = torch.cat([mine, -mine])
        torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX, group=self.group)
        both = both.cpu()
        if not torch.equal(both[:3], -both[3:]):
            raise RuntimeError(
                f"tensor-parallel ranks disagree on {what} (check {self.checks}, rank {process_rank()}): "
                "every rank must run the same loop on the same inputs (prompt, seed, settings); "
                "a decision from a rank's own clock or a non-deterministic kernel makes them part")

    def from_rank_zero(self, values: list[float]) -> list[float]:
        """Rank 0's values on every rank."""
        shared = torch.tensor(values, dtype=torch.float64, device=self.device)
        torch.distributed.broadcast(shared, src=torch.distributed.get_global_rank(self.group, 0), group=self.group)
        return shared.cpu().tolist()


class RankZeroClock:
    """A timing policy (framework.core.policy.Policy) on a tensor-parallel target: every rank sees rank 0's step
    timings, so every rank plans and trims alike (the cost table is agreed by HFTarget.forward_costs)."""

    TIMES = ("draft_s", "target_s", "verify_s", "other_s")

    def __init__(self, policy, agreement: RankAgreement):
        self.policy, self.agreement = policy, agreement

    def start(self, target, batch_size: int) -> None:
        self.policy.start(target, batch_size)

    def plan(self):
        return self.policy.plan()

    def trim(self, tree):
        return self.policy.trim(tree)

    def observe(self, tree, result, step) -> None:
        shared = self.agreement.from_rank_zero([getattr(step, name) for name in self.TIMES])
        self.policy.observe(tree, result, replace(step, **dict(zip(self.TIMES, shared))))

    def select(self, rows: torch.Tensor) -> None:
        self.policy.select(rows)


def shared_clock(policy, target):
    """The policy as every rank of `target` should run it: rank 0's clock under tensor parallelism, else as is."""
    agreement = getattr(target, "agreement", None)
    return policy if policy is None or agreement is None else RankZeroClock(policy, agreement)
