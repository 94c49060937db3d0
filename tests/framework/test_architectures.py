"""The stacks users bring, tiny and random in their published shapes: Llama-3 (rope scaling), Qwen3 (q/k norms),
Qwen3-MoE and Mixtral (routed experts), Mistral, Gemma-3 and GPT-OSS (sliding windows; Gemma-3 and GPT-OSS with
global layers between, GPT-OSS with attention sinks), DeepSeek-V3 (MLA: a value head narrower than the query/key
head, a compressed cache; routed and shared experts) and GLM-4.5 (half-rotary, q/k/v biases, routed experts).
Every method's greedy decoding is transformers' greedy decoding, past the window (8 in the tiny configs), on the
tree attention (and a draft tree on each stack's own attention over our dense masks: the form and keys each
forward takes)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.real import exact_loop_law, teacher_forced_law
from proposers import DraftModelProposer
from proposers.eagle.head import EagleConfig
from tests.composed import REPRESENTATIVES, composed
from tests.proposers.test_proposer_contract import REPEATS

CONF = Path(__file__).resolve().parents[2] / "conf"
STACKS = ("llama3", "qwen3", "qwen3_moe", "mixtral", "mistral", "gemma3", "gpt_oss", "deepseek_v3", "glm4_moe")
# Every method; configs that repeat another's at other settings (the contract's REPEATS) add nothing per stack.
METHODS = sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none" and p.stem not in REPEATS)
# The default tier: on every stack, one method of each way of reading the target (tests/composed.py
# REPRESENTATIVES); every method on every stack under -m slow.
PROMPT = torch.tensor([[40, 3, 9, 1, 0, 22, 5, 5]])
GREEDY = SamplingConfig(temperature=0)


def load(*overrides: str):
    return composed("config", "models=tiny", "target.dtype=float64", *overrides)


# methods whose parts are layers of the target's own class: composed with the stack's target
OWN_CLASS = {"mtp", "mtp_chain"}


@cache
def parts_of(method: str, stack: str = "llama"):
    """The method's parts, composed once: every tiny stack has the same sizes (vocabulary 64, width 32, 2 layers), so
    one composition serves them all (composing is most of this file's time), but for OWN_CLASS."""
    return load(f"proposer={method}", *([f"target=tiny_{stack}"] if method in OWN_CLASS else [])).proposer


@cache
def target_of(stack: str):
    return instantiate(load(f"target=tiny_{stack}").target)


def transformers_greedy(stack: str, new_tokens: int, *overrides: str) -> list[int]:
    """The argmax of the model's own forward over the whole sequence at each step: its own attention and masks, no
    cache (a fresh copy: HFTarget moves its model onto the tree attention). generate() would stop at, or with
    min_new_tokens forbid, the config's EOS id, which random weights emit like any other."""
    model, sequence = instantiate(load(f"target=tiny_{stack}", *overrides).target), PROMPT
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(sequence, use_cache=False).logits[:, -1]  # [1, V]
            sequence = torch.cat([sequence, logits.argmax(-1, keepdim=True)], dim=1)
    return sequence[0, PROMPT.shape[1]:].tolist()


@pytest.mark.parametrize("methods", [REPRESENTATIVES, pytest.param(tuple(METHODS), marks=pytest.mark.slow)],
                         ids=["representatives", "every_method"])
@pytest.mark.parametrize("stack", STACKS)
def test_every_method_decodes_transformers_greedy(stack, methods):
    model, new_tokens = target_of(stack), 12
    want = transformers_greedy(stack, new_tokens)
    differ = {}
    assert set(methods) <= set(METHODS)
    for method in methods:
        got = generate(HFTarget(model), instantiate(parts_of(method, stack))(),
                       PROMPT, new_tokens, GREEDY).tokens[0].tolist()
        if got != want:
            differ[method] = got
    own = instantiate(load(f"target=tiny_{stack}").target)  # the model's own attention over our dense masks
    dense = generate(HFTarget(own, backend=None), instantiate(parts_of("draft_tree"))(), PROMPT, new_tokens, GREEDY)
    if dense.tokens[0].tolist() != want:
        differ["draft_tree, dense masks"] = dense.tokens[0].tolist()
    assert not differ, (want, differ)


@pytest.mark.parametrize("stack",
                         [pytest.param(s, marks=pytest.mark.slow) for s in ("mistral", "gemma3")] + ["gpt_oss"])
def test_sliding_window_targets_decode_far_past_their_window(stack):
    """Window 16, 200 new tokens: a draft tree on the tree attention (SDPA here) and EAGLE-3's dynamic tree on the
    model's own attention over our dense masks (a dict per layer type for Gemma-3 and GPT-OSS; additive for
    GPT-OSS's eager attention, boolean for the others' SDPA); Mistral's one window for every layer and Gemma-3's
    SDPA under -m slow (the 12-token test passes their window of 8 on both paths)."""
    window, new_tokens = ["target.sliding_window=16"], 200
    want = transformers_greedy(stack, new_tokens, *window)
    for backend, method in (("auto", "draft_tree"), (None, "eagle3")):
        model = instantiate(load(f"target=tiny_{stack}", *window).target)  # its own: a backend moves it to ours
        make = instantiate(load(f"target=tiny_{stack}", f"proposer={method}", *window).proposer)
        got = generate(HFTarget(model, backend=backend), make(), PROMPT, new_tokens, GREEDY).tokens[0].tolist()
        assert got == want, (method, backend, next(i for i, (a, b) in enumerate(zip(got, want)) if a != b))


# the interpreter's kernel through a whole model; windows and sinks on the kernel: test_tree_attention
@pytest.mark.slow
def test_sinks_and_windows_on_the_triton_kernel():
    """GPT-OSS (sinks, sliding and global layers) with EAGLE-3's trees on the kernel (its interpreter here)."""
    make = instantiate(load("target=tiny_gpt_oss", "proposer=eagle3").proposer)
    got = generate(HFTarget(target_of("gpt_oss"), backend="triton"), make(), PROMPT, 10, GREEDY).tokens[0].tolist()
    assert got == transformers_greedy("gpt_oss", 10)  # 18 positions: past the window of 8


# The kernel's whole-model decodes (7 s each in the interpreter) under -m slow: a value head of another width on the
# kernel stays in the default tier's unit test (test_tree_attention).
@pytest.mark.parametrize("backend", ["reference", pytest.param("triton", marks=pytest.mark.slow)])
@pytest.mark.parametrize("stack", ["deepseek_v3", "glm4_moe"])
def test_mla_and_glm_on_the_other_tree_attention_backends(stack, backend):
    """The every-method test runs SDPA (auto on CPU); a draft tree on the reference and the kernel (its interpreter
    here) too: MLA's value head (8) narrower than its query/key head (12), GLM-4.5's half-rotary grouped heads."""
    make = instantiate(load(f"target=tiny_{stack}", "proposer=draft_tree").proposer)
    got = generate(HFTarget(target_of(stack), backend=backend), make(), PROMPT, 12, GREEDY).tokens[0].tolist()
    assert got == transformers_greedy(stack, 12)


@pytest.mark.parametrize("stack", STACKS)
def test_eagle3_default_layers_are_the_same_hidden_states_in_every_stack(stack):
    """A head with no layer ids reads hidden_states (2, L//2, L-3) (EAGLE's patched Llama; SpecForge's [1, L//2-1, L-4]
    in its output-of-layer ids): at L = 8, [2, 4, 5], as the stack's own forward numbers them."""
    model = instantiate(load(f"target=tiny_{stack}", "target.num_layers=8").target)
    layers = EagleConfig("eagle3", model.config.hidden_size,
                         model.config.vocab_size).layers_for(model.config.num_hidden_layers)
    assert layers == (2, 4, 5)
    target = HFTarget(model, backend=None)
    target.provide_hidden(layers)
    got = target.prefill(PROMPT).hidden  # [1, L, 3, H]
    with torch.no_grad():
        own = model(PROMPT, output_hidden_states=True).hidden_states
    assert torch.allclose(got, torch.stack([own[i] for i in layers], dim=2), atol=1e-9)


def test_an_attention_that_takes_no_4d_mask_is_named():
    model = instantiate(load("target=tiny_llama3").target)
    model.set_attn_implementation("flex_attention")
    with pytest.raises(ValueError, match="flex_attention.*takes no 4D tree mask"):
        generate(HFTarget(model, backend=None), None, PROMPT, 2, GREEDY)


WINDOWED = ("mixtral", "mistral", "gemma3", "gpt_oss")
# DeepSeek-V3's and GLM-4.5's routers compute in float32 whatever the model's dtype, and a float32 product's rounding
# follows the forward's row count (a tree's rows against teacher forcing's): their laws agree to float32's precision
# (TV 3e-9 on GLM-4.5 here; 5e-17 with the router patched to float64).
FLOAT32_ROUTERS = ("deepseek_v3", "glm4_moe")


@pytest.mark.parametrize("stack", STACKS)
def test_a_draft_tree_keeps_each_stacks_law(stack):
    """The exact law of 3 tokens at T = 1 through the loop with a 2x2 draft tree, on a vocabulary-3 target of each
    stack (window 2: the tree's nodes pass it), against the stack's own attention (teacher-forced, no tree path)."""
    toy = dict(vocab_size=3, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
    target = tiny_random_model(stack, seed=0, sliding_window=2 if stack in WINDOWED else None, **toy)
    draft = tiny_random_model("llama", seed=1, **toy)
    prompt, sampling = torch.tensor([[1, 2, 0]]), SamplingConfig()
    spec = exact_loop_law(target, lambda: DraftModelProposer(draft, branching=2, depth=2, kind="point"),
                          prompt, 3, sampling)
    assert compare(spec, teacher_forced_law(target, prompt, 3, sampling)).passes(
        1e-7 if stack in FLOAT32_ROUTERS else 1e-9)
