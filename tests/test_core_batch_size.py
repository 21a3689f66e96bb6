"""How many samples a batch holds, as every adapter counts them."""

from __future__ import annotations

from collections import OrderedDict

import torch

from tracker_core.adapter import batches_in, samples_in


def test_a_tuple_of_tensors_holds_the_first_dimension_of_its_first_tensor() -> None:
    assert samples_in((torch.zeros(3, 2), torch.zeros(3))) == 3


def test_a_tensor_holds_its_first_dimension() -> None:
    assert samples_in(torch.zeros(5, 2)) == 5


def test_a_zero_dimensional_tensor_holds_one_sample() -> None:
    assert samples_in(torch.tensor(1.0)) == 1


def test_tensors_nested_in_mappings_and_lists_are_found_depth_first() -> None:
    assert samples_in({"ids": ["a", "b"], "x": [torch.zeros(5, 1)]}) == 5
    assert samples_in(OrderedDict(x=torch.zeros(2, 1), y=torch.zeros(7))) == 2


def test_a_tensor_subclass_counts_like_a_tensor() -> None:
    assert samples_in([torch.nn.Parameter(torch.zeros(4, 1))]) == 4


def test_a_list_without_tensors_holds_its_items() -> None:
    assert samples_in(["a", "b", "c"]) == 3


def test_a_batch_without_tensors_or_items_holds_none() -> None:
    assert samples_in(None) == 0
    assert samples_in({"text": "abc"}) == 0


def test_a_loader_holds_its_length_in_batches_and_an_unsized_one_none() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(10))
    assert batches_in(torch.utils.data.DataLoader(data, batch_size=3)) == 4
    assert batches_in(iter([1, 2])) is None
