"""Untrusted plain data is decoded within bounds: only plain numeric tensor dtypes, bounded nesting,
list lengths, integers and blobs, each refusal a ProgressStateError naming the key, fast."""

from __future__ import annotations

import base64
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torchdata")

import numpy as np
import torch
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import ProgressStateError, Tracker
from tracker_core.data._rng import GlobalRng
from tracker_core.state._codec import (
    MAX_BLOB_BYTES,
    MAX_DEPTH,
    MAX_LIST_LENGTH,
    TENSOR_DTYPES,
    check_plain,
    from_plain,
    to_plain,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

_ALL_DTYPES = sorted(
    {name: value for name in dir(torch) if isinstance(value := getattr(torch, name), torch.dtype)}.items()
)


def _tagged(dtype: str, shape: list[Any], data: str) -> dict[str, Any]:
    return {"__tensor__": {"dtype": dtype, "shape": shape, "data": data}}


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels):
        node["k"] = {}
        node = node["k"]
    return root


@pytest.mark.parametrize(("name", "dtype"), _ALL_DTYPES, ids=[name for name, _ in _ALL_DTYPES])
def test_a_tagged_tensor_decodes_only_plain_numeric_dtypes(name: str, dtype: torch.dtype) -> None:
    plain = _tagged(name, [2], base64.b64encode(bytes(2 * dtype.itemsize)).decode())
    if dtype in TENSOR_DTYPES.values() and name == str(dtype).removeprefix("torch."):
        assert from_plain(plain, "state").dtype == dtype
        return
    with pytest.raises(ProgressStateError, match="is not one a saved state holds") as raised:
        from_plain(plain, "state")
    assert raised.value.key == "state.__tensor__.dtype"


def test_every_allowed_dtype_round_trips() -> None:
    for dtype in TENSOR_DTYPES.values():
        tensor = torch.arange(6).reshape(2, 3).to(dtype)
        assert torch.equal(from_plain(to_plain({"t": tensor}))["t"], tensor)


def test_a_bool_tensor_holding_other_bytes_is_refused() -> None:
    with pytest.raises(ProgressStateError, match="bytes other than 0 and 1") as raised:
        from_plain(_tagged("bool", [3], base64.b64encode(b"\x00\x02\x01").decode()), "s")
    assert raised.value.key == "s.__tensor__.data"


def test_a_blob_of_the_wrong_size_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(ProgressStateError, match="expected 8 bytes") as raised:
        from_plain(_tagged("int64", [1], "A" * 10_000_000), "s")
    assert raised.value.key == "s.__tensor__.data"


def test_a_shape_above_the_blob_limit_is_refused_without_allocating() -> None:
    with pytest.raises(ProgressStateError, match=f"more than {MAX_BLOB_BYTES} bytes") as raised:
        from_plain(_tagged("float64", [2**40, 2**40], ""), "s")
    assert raised.value.key == "s.__tensor__.shape"


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 2**100_000], ids=["2**64", "-2**63-1", "2**100000"])
def test_an_integer_beyond_64_bits_is_refused(value: int) -> None:
    with pytest.raises(ProgressStateError, match="does not fit 64 bits") as raised:
        from_plain({"a": [1, value]}, "s")
    assert raised.value.key == "s.a.1"


class _Untouchable(list[int]):
    """A list whose items must not be visited (the length check comes first)."""

    def __iter__(self) -> Any:
        raise AssertionError("the items of an over-long list were visited")


@pytest.mark.parametrize("decode", [from_plain, check_plain])
def test_a_million_item_list_and_a_ten_thousand_deep_dict_are_refused_before_being_walked(decode: Any) -> None:
    with pytest.raises(ProgressStateError, match=f"at most {MAX_LIST_LENGTH}") as raised:
        decode({"items": _Untouchable([0] * 10**6)}, "s")
    assert raised.value.key == "s.items"
    with pytest.raises(ProgressStateError, match=f"deeper than {MAX_DEPTH}") as raised:
        decode({"d": _deep(10**4)}, "s")
    assert raised.value.key == "s.d" + ".k" * (MAX_DEPTH - 1)  # refused at the limit, the rest never visited


def test_check_plain_names_a_non_plain_value_and_a_non_str_key() -> None:
    with pytest.raises(ProgressStateError, match="expected plain data, got set") as raised:
        check_plain({"a": [{"b": {1, 2}}]}, "s")
    assert raised.value.key == "s.a.0.b"
    with pytest.raises(ProgressStateError, match="dict key 3 is not a str"):
        check_plain({"a": {3: 1}})


def test_a_numpy_rng_position_past_its_624_words_is_refused_and_changes_nothing() -> None:
    state = GlobalRng.capture().to_plain()
    state["numpy"]["pos"] = 100_000
    before = np.random.get_state()
    with pytest.raises(ProgressStateError, match="must be <= 624") as raised:
        GlobalRng.from_plain(state).apply()
    assert raised.value.key == "numpy.pos"
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), before))
    np.random.random()  # still draws


def _stateful_entry_and_tracker() -> tuple[dict[str, Any], Tracker, StatefulDataLoader]:
    loader = StatefulDataLoader(TensorDataset(torch.arange(12.0)), batch_size=3, shuffle=True)
    tracker = Tracker()
    tracker.track_train_loader(loader)
    tracker.progress.run_ready("fit")
    tracker.progress.run_started()
    tracker.progress.train.epoch_ready()
    tracker.progress.train.epoch_started()
    for _, batch in zip(range(2), loader):
        tracker.progress.train.batch_begin()
        tracker.progress.train.batch_end(len(batch[0]))
    return tracker.state_dict(), tracker, loader


def test_a_quantized_tensor_in_a_stateful_loaders_state_is_refused_naming_the_key() -> None:
    entry, tracker, _loader = _stateful_entry_and_tracker()
    generator = entry["train_loaders"][0]["epoch"]["loader_state"]["_sampler_iter_state"]["sampler_iter_state"]
    generator["generator"]["__tensor__"]["dtype"] = "qint8"
    progress_before, rng_before = tracker.progress.state_dict(), torch.get_rng_state()
    with pytest.raises(ProgressStateError, match="'qint8' is not one a saved state holds") as raised:
        tracker.load_state_dict(entry)
    assert raised.value.key == (
        "train_loaders.0.epoch.loader_state._sampler_iter_state.sampler_iter_state.generator.__tensor__.dtype"
    )
    assert tracker.progress.state_dict() == progress_before and torch.equal(torch.get_rng_state(), rng_before)


def test_a_deep_dict_in_a_stateful_loaders_state_is_refused_naming_the_key() -> None:
    entry, tracker, _loader = _stateful_entry_and_tracker()
    entry["train_loaders"][0]["epoch"]["loader_state"]["dataset_state"] = _deep(10**4)
    with pytest.raises(ProgressStateError, match="deeper than") as raised:
        tracker.load_state_dict(entry)
    assert raised.value.key.startswith("train_loaders.0.epoch.loader_state.dataset_state.k.k")


def test_a_damaged_loader_part_is_refused_at_load_when_the_loader_is_registered_later() -> None:
    """Lightning and Ignite register their train loaders after the load: the loader part is checked then too."""
    entry, _, _loader = _stateful_entry_and_tracker()
    entry["train_loaders"][0]["epoch"]["loader_state"]["_num_yielded"] = "2"
    late = Tracker()
    progress_before, rng_before = late.progress.state_dict(), torch.get_rng_state()
    with pytest.raises(ProgressStateError, match="expected an int") as raised:
        late.load_state_dict(entry)
    assert raised.value.key == "train_loaders.0.epoch.loader_state._num_yielded"
    assert late.progress.state_dict() == progress_before and torch.equal(torch.get_rng_state(), rng_before)


def test_a_stateful_loaders_state_missing_a_key_of_torchdata_is_refused_naming_it() -> None:
    entry, _tracker, _loader = _stateful_entry_and_tracker()
    del entry["train_loaders"][0]["epoch"]["loader_state"]["_sampler_iter_state"]["samples_yielded"]
    with pytest.raises(ProgressStateError) as raised:
        Tracker().validate_state_dict(entry)
    assert raised.value.key.startswith("train_loaders.0.epoch.loader_state._sampler_iter_state")
