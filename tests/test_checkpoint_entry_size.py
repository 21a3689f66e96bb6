"""One rank's checkpoint entry is small: RNG snapshots stored once, related ones as differences.

The entries that resume mid-epoch come from torchdata's StatefulDataLoader (a plain DataLoader's mid-epoch entry
holds no position: its resume reads the epoch from its start, warned)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import torch
from torch.utils.data import SequentialSampler, TensorDataset

from tracker_core import InexactResumeWarning, ProgressStateError, Tracker
from tracker_core.data._compact import Decoded, Seeded, blob_bytes_of, expand_loader, expand_rng
from tracker_core.data._position import LoaderPosition
from tracker_core.state._codec import bytes_to_text, to_plain

pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader

from helpers.small_entry import stateful_loader, trained

MAX_ENTRY_BYTES = 16 * 1024


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value).encode())


def _base64(value: Any) -> Any:
    """An expanded state with each blob as plain base64 text."""
    if isinstance(value, (Decoded, Seeded)):
        return bytes_to_text(blob_bytes_of(value, ""))
    if isinstance(value, list):
        return [_base64(item) for item in value]
    return {name: _base64(item) for name, item in value.items()} if isinstance(value, dict) else value


def _rest_of_epoch(entry: Any) -> list[list[float]]:
    loader = stateful_loader()
    tracker = Tracker()
    tracker.track_train_loader(loader)
    tracker.load_state_dict(json.loads(json.dumps(entry)))
    return [batch[0].tolist() for batch in loader]


def _plain_entry() -> dict[str, Any]:
    """The entry after 3 batches of a plain shuffled loader: its save inside the epoch is warned."""
    tracker, _loader, _ = trained(batches=3)
    with pytest.warns(InexactResumeWarning, match="a plain DataLoader has no position of its own"):
        return tracker.state_dict()


def test_one_ranks_entry_with_one_tracked_plain_train_loader_is_at_most_16_kb_as_json() -> None:
    torch.manual_seed(0)
    assert _json_bytes(_plain_entry()) <= MAX_ENTRY_BYTES


# A StatefulDataLoader's mid-epoch entry saves its sampler generator in full beside the loader's own state (about
# 3.5 KB): without an iterator hook the tracker cannot tell that the loader's state sets it as it is now.
MAX_STATEFUL_ENTRY_BYTES = 18_944  # 18.5 KB


@pytest.mark.parametrize("whole_epochs", [0, 1], ids=["first-epoch", "second-epoch"])
def test_one_ranks_entry_with_one_tracked_stateful_train_loader_is_at_most_18_5_kb_as_json(whole_epochs: int) -> None:
    torch.manual_seed(0)
    tracker, _loader, _ = trained(batches=3, loader=stateful_loader(), whole_epochs=whole_epochs)
    assert _json_bytes(tracker.state_dict()) <= MAX_STATEFUL_ENTRY_BYTES


def _own_generator(position: dict[str, Any]) -> str:
    """The sampler generator's state in a StatefulDataLoader's saved state, as its epoch began."""
    generator = position["epoch"]["loader_state"]["_sampler_iter_state"]["sampler_iter_state"]["generator"]
    return str(generator["__tensor__"]["data"])


@pytest.mark.parametrize(("whole_epochs", "form"), [(0, "s:"), (1, "x:")], ids=["first-epoch", "second-epoch"])
def test_a_stateful_loaders_mid_epoch_position_holds_its_sampler_generator_in_full_once(
    whole_epochs: int, form: str
) -> None:
    """Mid-epoch, ``generators`` holds the sampler generator as it is; the StatefulDataLoader's state holds it as its
    epoch began: a seed in the first epoch, later the difference from the generator in ``generators``."""
    torch.manual_seed(0)
    tracker, _loader, _ = trained(batches=3, loader=stateful_loader(), whole_epochs=whole_epochs)
    position = tracker.state_dict()["train_loaders"][0]
    assert "sampler.generator" in position["generators"]
    assert _own_generator(position).startswith(form) and len(_own_generator(position)) < 200
    assert _json_bytes(position) < 5 * 1024  # one torch generator state in full is about 3.5 KB


class _SequentialWithGenerator(SequentialSampler):
    """A sampler with a generator that no loader state holds (nothing draws from it in an epoch)."""

    def __init__(self, data: Any) -> None:
        super().__init__(data)
        self.generator = torch.Generator().manual_seed(5)


def test_a_sampler_generator_the_loaders_own_state_does_not_hold_is_saved_mid_epoch() -> None:
    data = TensorDataset(torch.arange(64.0))
    loader = StatefulDataLoader(data, batch_size=4, sampler=_SequentialWithGenerator(data))
    position = LoaderPosition(loader)
    iterator = iter(loader)
    next(iterator)
    assert "sampler.generator" in position.state_dict(batches_consumed=1)["generators"]


def test_a_stateful_loaders_position_at_its_epochs_end_holds_its_sampler_generator_in_full_once() -> None:
    """At the epoch's end the next epoch draws from the sampler generator as it is: saved in ``generators``, the
    loader state's copy as the difference from it."""
    torch.manual_seed(0)
    tracker, _loader, _ = trained(batches=16, loader=stateful_loader(), whole_epochs=1)
    position = tracker.state_dict()["train_loaders"][0]
    assert "sampler.generator" in position["generators"]
    assert _own_generator(position).startswith("x:") and len(_own_generator(position)) < 200
    assert _json_bytes(position) < 5 * 1024


@pytest.mark.parametrize("whole_epochs", [0, 1])
def test_a_stateful_loader_resumed_mid_epoch_leaves_its_sampler_generator_as_the_uninterrupted_run(
    whole_epochs: int,
) -> None:
    """The sampler generator is as the uninterrupted run left it: the rest of the epoch, the next epoch and a
    checkpoint saved in the resumed epoch all match."""
    torch.manual_seed(0)
    tracker, loader, iterator = trained(batches=3, loader=stateful_loader(), whole_epochs=whole_epochs)
    entry = json.loads(json.dumps(tracker.state_dict()))
    rest = [batch[0].tolist() for batch in iterator]
    next_epoch = [batch[0].tolist() for batch in loader]
    resumed = stateful_loader()
    fresh = Tracker()
    fresh.track_train_loader(resumed)
    fresh.load_state_dict(entry)
    batches = iter(resumed)
    first = next(batches)[0].tolist()
    again = fresh._loaders[0].state_dict(batches_consumed=4)  # saved in the resumed epoch
    assert again["generators"]["sampler.generator"] == entry["train_loaders"][0]["generators"]["sampler.generator"]
    assert [first, *(batch[0].tolist() for batch in batches)] == rest
    assert [batch[0].tolist() for batch in resumed] == next_epoch
    assert torch.equal(resumed.sampler.generator.get_state(), loader.sampler.generator.get_state())


@pytest.mark.parametrize("carrier", ["json", "torch.save"])
def test_a_stateful_loader_is_handed_back_exactly_the_state_it_gave(carrier: str, tmp_path: Any) -> None:
    torch.manual_seed(0)
    tracker, loader, iterator = trained(batches=3, loader=stateful_loader(), whole_epochs=1)
    given = to_plain(loader.state_dict())
    entry = tracker.state_dict()
    if carrier == "json":
        entry = json.loads(json.dumps(entry))
    else:
        torch.save(entry, tmp_path / "entry.pt")
        entry = torch.load(tmp_path / "entry.pt", weights_only=True)
    resumed = stateful_loader()
    handed: list[dict[str, Any]] = []
    load = resumed.load_state_dict
    resumed.load_state_dict = lambda state: (handed.append(state), load(state))[1]  # type: ignore[method-assign]
    fresh = Tracker()
    fresh.track_train_loader(resumed)
    fresh.load_state_dict(entry)
    rest = [batch[0].tolist() for batch in resumed]
    assert [to_plain(state) for state in handed if state] == [given]
    assert rest == [batch[0].tolist() for batch in iterator]


_OWN_GENERATOR = "epoch.loader_state._sampler_iter_state.sampler_iter_state.generator.__tensor__.data"


def _damage_difference(position: dict[str, Any]) -> str:
    own = position["epoch"]["loader_state"]["_sampler_iter_state"]["sampler_iter_state"]["generator"]["__tensor__"]
    assert own["data"].startswith("x:")
    own["data"] = "x:AAAA"
    return _OWN_GENERATOR


def _damage_base(position: dict[str, Any]) -> str:
    position["generators"]["sampler.generator"] = position["generators"]["sampler.generator"][:-8]
    return "generators.sampler.generator"


def _drop_base(position: dict[str, Any]) -> str:
    del position["generators"]["sampler.generator"]
    return _OWN_GENERATOR


@pytest.mark.parametrize(
    "damage", [_damage_difference, _damage_base, _drop_base], ids=["difference", "its-base", "its-base-missing"]
)
def test_a_stateful_loader_state_with_a_damaged_generator_difference_is_refused_and_nothing_changes(
    damage: Any,
) -> None:
    torch.manual_seed(0)
    tracker, _loader, _ = trained(batches=16, loader=stateful_loader(), whole_epochs=1)  # saved at the epoch's end
    entry = copy.deepcopy(tracker.state_dict())
    key = damage(entry["train_loaders"][0])
    loader = stateful_loader()
    fresh = Tracker()
    fresh.track_train_loader(loader)
    before = fresh.progress.state_dict(), loader.sampler.generator.get_state()
    with pytest.raises(ProgressStateError) as caught:
        fresh.load_state_dict(entry)
    assert caught.value.key == f"train_loaders.0.{key}"
    assert fresh.progress.state_dict() == before[0]
    assert torch.equal(loader.sampler.generator.get_state(), before[1])


def test_the_loader_position_holds_no_full_rng_snapshot_when_the_global_one_determines_it() -> None:
    torch.manual_seed(0)
    assert _json_bytes(_plain_entry()["train_loaders"][0]) < 1024


def test_an_entry_resumes_the_rest_of_the_epoch_exactly_in_the_short_form() -> None:
    torch.manual_seed(0)
    # 2000 draws a batch: the torch generator twists between the loader's snapshot and the global one
    tracker, _loader, iterator = trained(batches=3, loader=stateful_loader(), draws_per_batch=2000)
    entry = tracker.state_dict()
    assert _rest_of_epoch(entry) == [batch[0].tolist() for batch in iterator]


def test_an_entry_with_plain_base64_blobs_resumes_exactly() -> None:
    torch.manual_seed(0)
    tracker, _loader, iterator = trained(batches=3, loader=stateful_loader())
    entry = tracker.state_dict()
    rng = expand_rng(entry["rng"])
    plain = _base64({**entry, "rng": rng, "train_loaders": [expand_loader(entry["train_loaders"][0])]})
    assert plain["rng"]["version"] == 2 and plain["train_loaders"][0]["version"] == 3
    assert plain != entry
    assert _rest_of_epoch(plain) == [batch[0].tolist() for batch in iterator]


@pytest.mark.parametrize("version", [1, 2])
def test_a_loader_state_of_a_development_builds_version_is_refused(version: int) -> None:
    """Loader states of versions 1 and 2 (development builds, before 0.1.0) are refused, not read."""
    torch.manual_seed(0)
    tracker, _loader, _ = trained(batches=3, loader=stateful_loader())
    entry = tracker.state_dict()
    entry["train_loaders"][0]["version"] = version
    with pytest.raises(ProgressStateError, match="development build") as error:
        Tracker().load_state_dict(entry)
    assert error.value.key == "train_loaders.0.version"


def test_a_loader_position_saved_alone_is_complete_without_the_entrys_rng() -> None:
    torch.manual_seed(0)
    tracker, _loader, iterator = trained(batches=3, loader=stateful_loader())
    state = tracker._loaders[0].state_dict(batches_consumed=3)
    loader = stateful_loader()
    LoaderPosition(loader).load_state_dict(json.loads(json.dumps(state)))
    assert [batch[0].tolist() for batch in loader] == [batch[0].tolist() for batch in iterator]
