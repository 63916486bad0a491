import torch

from posttrain.engines import counter_uniforms, row_seeds
from posttrain.engines.sampling import _mix64, derived_seed, mix64


def test_splitmix64_reference_value():
    # splitmix64 seeded with 0: the first output is mix64(0)
    assert mix64(0) == 0xE220A8397B1DCDAF


def test_tensor_mix64_matches_the_integer_one_bit_for_bit():
    xs = [0, 1, 7, 2**62 + 5, 2**63 - 1, 12345678901234567]
    got = [v & (2**64 - 1) for v in _mix64(torch.tensor(xs)).tolist()]
    assert got == [mix64(x) for x in xs]


def test_counter_uniforms_are_uniform_and_depend_on_seed_and_position():
    n = 100_000
    u = counter_uniforms(torch.full((n,), 11), torch.arange(n))
    assert 0 <= float(u.min()) and float(u.max()) < 1
    hist = torch.histc(u.float(), bins=10, min=0, max=1) / n
    torch.testing.assert_close(hist, torch.full((10,), 0.1), atol=0.005, rtol=0)  # ~5 s.e.
    # lag-1 correlation of independent draws: standard error 1/sqrt(n) = 0.0032; 0.01 is 3 s.e.
    assert abs(float(torch.corrcoef(torch.stack([u[:-1], u[1:]]))[0, 1])) < 0.01
    other = counter_uniforms(torch.full((n,), 12), torch.arange(n))
    # 53-bit uniforms of two streams coincide with chance 2^-53 each: < 10 of 1e5 ever
    assert float((u == other).float().mean()) < 1e-4


def test_row_seeds_are_distinct_and_fit_63_bits():
    seeds = row_seeds(3, 1000)
    assert len(set(seeds)) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert row_seeds(3, 5) == seeds[:5] and row_seeds(4, 5) != seeds[:5]


def test_a_continued_request_gets_a_seed_of_its_own_at_every_length():
    """What ``VLLMEngine`` gives vLLM: a row seeded 3 re-prefilled at lengths 10..1009 (a
    sample continued chunk by chunk) never replays a stream, and one length one seed."""
    seeds = [derived_seed(3, length) for length in range(10, 1010)]
    assert len(set(seeds)) == 1000 and all(0 <= s < 2**63 for s in seeds)
    assert seeds[:5] == row_seeds(3, 15)[10:] and derived_seed(3, 10) == seeds[0]
