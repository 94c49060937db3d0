import pytest
import torch

from framework.core.sampling import SamplingConfig, process_logits, process_tree_logits, seen_along_tree, seen_tokens


def test_greedy_is_first_argmax_on_ties():
    p = process_logits(torch.tensor([[1.0, 3.0, 3.0, 0.0]]), SamplingConfig(temperature=0))
    assert p.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_temperature_and_top_k():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    p = process_logits(logits, SamplingConfig(temperature=0.5, top_k=2))
    expected = torch.softmax(torch.tensor([4.0, 6.0], dtype=torch.float64), -1)
    assert torch.allclose(p[0, 2:], expected) and p[0, :2].eq(0).all()


def test_top_p_keeps_smallest_set_reaching_mass():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    p = process_logits(probs.log(), SamplingConfig(top_p=0.75))
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0, 0]], dtype=torch.float64))
    p = process_logits(probs.log(), SamplingConfig(top_p=0.85))
    assert (p > 0).tolist() == [[True, True, True, False]]


def test_min_p():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64)
    p = process_logits(probs.log(), SamplingConfig(min_p=0.35))
    assert (p > 0).tolist() == [[True, True, False, False]]


def test_repetition_penalty_along_each_path():
    V = 5
    logits = torch.randn(1, 4, V, dtype=torch.float64)
    context = torch.tensor([[0]])
    tokens, parents = torch.tensor([[1, 2, 3]]), torch.tensor([-1, 0, -1])
    cfg = SamplingConfig(repetition_penalty=2.0)
    got = process_tree_logits(logits, cfg, seen_tokens(context, V), tokens, parents)
    # Node 1's own sequence is context + (node 0, node 1) = [0, 1, 2]; node 2's is [0, 3].
    for row, seq in [(0, [0]), (1, [0, 1]), (2, [0, 1, 2]), (3, [0, 3])]:
        seen = torch.zeros(1, V, dtype=torch.bool)
        seen[0, seq] = True
        assert torch.allclose(got[:, row], process_logits(logits[:, row], cfg, seen))
    assert seen_along_tree(seen_tokens(context, V), tokens, parents)[0, 3].nonzero().flatten().tolist() == [0, 3]


def test_penalty_changes_the_law():
    logits = torch.tensor([[2.0, 1.0, -1.0]])
    seen = torch.tensor([[True, False, True]])
    p = process_logits(logits, SamplingConfig(repetition_penalty=2.0), seen)
    assert torch.allclose(p, torch.softmax(torch.tensor([[1.0, 1.0, -2.0]]), -1))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-0.1), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_k=-1), "top_k"),
        (dict(min_p=1.0), "min_p"),
        (dict(repetition_penalty=0.0), "repetition_penalty"),
    ],
)
def test_bad_config_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)


def test_nan_logits_are_an_error():
    with pytest.raises(ValueError, match="NaN"):
        process_logits(torch.tensor([[0.0, float("nan")]]), SamplingConfig())


def test_penalty_without_history_is_an_error():
    with pytest.raises(ValueError, match="seen"):
        process_logits(torch.zeros(1, 3), SamplingConfig(repetition_penalty=1.2))


@pytest.mark.parametrize("temperature", [1e-38, 1e-39, 1e-45, 1e-300])
def test_tiny_temperatures_give_the_limit_law_not_nan(temperature):
    """logits / T overflowed to inf below T = 1e-38 (NaN laws, the last id every time); the limit of the
    law as T -> 0 is uniform over each row's maxima."""
    logits = torch.tensor([[0.5, 2.0, 2.0, -1.0], [3.0, 1.0, float("-inf"), 0.0]])
    p = process_logits(logits, SamplingConfig(temperature=temperature, top_p=0.9))
    assert torch.equal(p, torch.tensor([[0.0, 0.5, 0.5, 0.0], [1.0, 0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("bias, message", [
    ({5.5: 1.0}, "not a token id"), ({True: 1.0}, "not a token id"), ({"a": 1.0}, "not a token id"),
    ({3: 1e39}, "finite in float32"), ({3: float("nan")}, "finite in float32"), ({-1: 1.0}, "ids must be >= 0"),
])
def test_a_logit_bias_that_is_no_bias_is_named(bias, message):
    """Keys that are not whole numbers are not read as ids, and a bias float32 cannot hold is refused (issue 58, 8)."""
    with pytest.raises(ValueError, match=message):
        SamplingConfig(logit_bias=bias)


def test_a_bias_that_overflows_the_logits_is_named_not_a_nan_law():
    cfg = SamplingConfig(logit_bias={1: 3e38})
    with pytest.raises(ValueError, match="logit_bias overflows"):
        process_logits(torch.tensor([[0.0, 3e38, 1.0]]), cfg)
    # digits and whole floats
    assert SamplingConfig(logit_bias={"2": 1.0, 3.0: -1.0}).logit_bias == ((2, 1.0), (3, -1.0))
