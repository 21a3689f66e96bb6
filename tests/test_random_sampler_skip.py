"""A resume slices torch's RandomSampler permutation instead of drawing the skipped indices one by one.

``random_sampler_after`` (tracker_core/data/_torch_compat.py) mirrors ``RandomSampler.__iter__``;
these compare it with torch's own sampler: the same indices after the skip and the same generator
states (the sampler's own, or the global one it seeds from) after the epoch.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import RandomSampler

from tracker_core.data._torch_compat import random_sampler_after

SIZE = 10


def _sampler(own_generator: bool, **options: object) -> RandomSampler:
    generator = torch.Generator().manual_seed(3) if own_generator else None
    return RandomSampler(range(SIZE), generator=generator, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("own_generator", [True, False], ids=["own-generator", "seeded-from-global"])
@pytest.mark.parametrize("count", [0, 1, 7, SIZE - 1])
def test_the_indices_after_a_skip_and_the_generators_after_the_epoch_are_torchs(
    own_generator: bool, count: int
) -> None:
    torch.manual_seed(5)
    reference = _sampler(own_generator)
    expected = list(itertools.islice(iter(reference), count, None))
    expected_states = (torch.get_rng_state(), reference.generator.get_state() if own_generator else None)

    torch.manual_seed(5)
    sampler = _sampler(own_generator)
    indices = random_sampler_after(sampler, count)
    assert indices is not None
    assert list(indices) == expected
    assert torch.equal(torch.get_rng_state(), expected_states[0])
    if own_generator:
        assert torch.equal(sampler.generator.get_state(), expected_states[1])


@pytest.mark.parametrize(
    ("sampler", "count"),
    [
        (_sampler(True, replacement=True), 1),
        (_sampler(True, num_samples=SIZE + 3), 1),
        (_sampler(True), SIZE),
    ],
    ids=["replacement", "more-samples-than-the-dataset", "past-the-permutation"],
)
def test_other_samplers_and_counts_are_left_to_torch(sampler: RandomSampler, count: int) -> None:
    assert random_sampler_after(sampler, count) is None
