import math

import torch

from harness.enumerate import ZERO_ATOM, enumerate_law


def test_categorical_law_is_exact():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
    law = enumerate_law(lambda rng: rng.categorical(probs.expand(rng.batch_size, 4)).tolist())
    assert set(law) == {0, 2, 3}
    assert all(math.isclose(law[k], probs[k].item(), abs_tol=1e-15) for k in law)


def test_reused_uniform_is_conditioned():
    def run(rng):
        u = rng.uniform((rng.batch_size,))
        first, second = u < 0.3, u < 0.5
        return list(zip(first.tolist(), second.tolist()))

    law = enumerate_law(run)
    assert law == {(True, True): 0.3, (False, True): law[(False, True)], (False, False): law[(False, False)]}
    assert math.isclose(law[(False, True)], 0.2) and math.isclose(law[(False, False)], 0.5)


def test_less_or_equal_zero_has_an_atom():
    law = enumerate_law(lambda rng: (rng.uniform((rng.batch_size,)) <= 0.0).tolist())
    assert law[True] == ZERO_ATOM
    strict = enumerate_law(lambda rng: (rng.uniform((rng.batch_size,)) < 0.0).tolist())
    assert strict == {False: 1.0}


def test_a_uniform_found_above_zero_stays_above_zero():
    """`u <= 0` False means u > 0: asking again must not branch on the atom a second time."""
    def run(rng):
        u = rng.uniform((rng.batch_size,))
        return list(zip((u <= 0.0).tolist(), (u <= 0.0).tolist()))

    assert enumerate_law(run) == {(True, True): ZERO_ATOM, (False, False): 1.0 - ZERO_ATOM}


def test_every_world_runs_once():
    def run(rng):
        a = rng.categorical(torch.full((rng.batch_size, 3), 1 / 3))
        b = rng.uniform((rng.batch_size, 2))
        return list(zip(a.tolist(), (b[:, 0] < 0.5).tolist(), (b[:, 1] < 0.25).tolist()))

    law = enumerate_law(run, batch_size=2)
    assert len(law) == 12 and math.isclose(sum(law.values()), 1.0)
    assert math.isclose(law[(1, True, False)], 1 / 3 * 0.5 * 0.75)


def test_the_zero_atom_is_the_default_sources():
    """The enumerator's chance of u == 0.0 must be TorchSource's: its uniforms are float64 multiples of 2^-53
    (the atom was float32's 2^-24)."""
    from framework.core.randomness import TorchSource

    u = TorchSource(seed=0).uniform((100_000,))
    assert u.dtype == torch.float64 and torch.equal(u * 2**53, (u * 2**53).round())
    assert bool(((u * 2**24) != (u * 2**24).round()).any())  # finer than float32's grid
    assert ZERO_ATOM == 2.0**-53


def test_draws_of_one_world_in_one_call_are_taken_in_order():
    """A categorical of [B, 2, V] and a comparison of [B, 2] uniforms draw twice per world in one call: each
    draw is its own branch point, replayed in its own place (a mix-up of the two gives a wrong law)."""
    first, second = [0.2, 0.8, 0.0], [0.5, 0.25, 0.25]

    def run(rng):
        tokens = rng.categorical(torch.tensor([first, second], dtype=torch.float64).expand(rng.batch_size, 2, 3))
        coins = rng.uniform((rng.batch_size, 2)) < torch.tensor([0.1, 0.7], dtype=torch.float64)
        return [tuple(t) + tuple(c) for t, c in zip(tokens.tolist(), coins.tolist())]

    law = enumerate_law(run, batch_size=3)
    assert len(law) == 2 * 3 * 2 * 2 and math.isclose(sum(law.values()), 1.0)
    for (a, b, c, d), weight in law.items():
        assert math.isclose(weight, first[a] * second[b] * (0.1 if c else 0.9) * (0.7 if d else 0.3)), (a, b, c, d)
