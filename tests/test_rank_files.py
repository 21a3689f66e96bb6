"""Each rank's entry in its own file beside the checkpoint, the checkpoint keeping a constant-size index
(``tracker_core.adapter.write_rank_files`` / ``with_rank_files``): a resuming rank reads its own file only,
an elastic resume still maps, and a missing or damaged file is refused naming its key, nothing applied."""

from __future__ import annotations

import functools
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DistributedSampler, TensorDataset

from tracker_core import ProgressStateError, Tracker
from tracker_core.adapter import (
    RankFiles,
    RankTensors,
    remove_other_saves,
    with_rank_files,
    write_rank_files,
    write_rank_tensors,
)
from tracker_core.checkpoints import read_checkpoint

from helpers.gloo import run_on_two_ranks

pytest.importorskip("torchdata")

from helpers.small_entry import BATCH_SIZE, DATASET_SIZE, shuffled_loader, trained

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


def _loader(rank: int, world: int = 2) -> Any:
    data = TensorDataset(torch.arange(float(DATASET_SIZE)))
    return shuffled_loader(DistributedSampler(data, num_replicas=world, rank=rank, seed=0))


def _stateful_loader(rank: int) -> Any:
    """As :func:`_loader` at world size 2, a StatefulDataLoader: its own state resumes it at its batch."""
    data = TensorDataset(torch.arange(float(DATASET_SIZE)))
    return StatefulDataLoader(data, batch_size=BATCH_SIZE, sampler=DistributedSampler(data, 2, rank, seed=0))


def _gathered(world: int) -> dict[str, Any]:
    """What the writer holds after a gather of ``world`` ranks: rank 0's entry plus every rank's."""
    ranks = []
    for rank in range(world):
        torch.manual_seed(rank)
        tracker, _loader_kept, _ = trained(3, _loader(rank, world))
        ranks.append(tracker.state_dict())
    return {**ranks[0], "ranks": ranks}


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A 2-rank entry split beside ``checkpoint.ckpt`` (written after it, as Lightning's IO does), and the entry."""
    gathered = _gathered(2)
    path = tmp_path / "checkpoint.ckpt"
    split = write_rank_files(gathered, path)
    torch.save({"tracker": split}, path)
    return path, gathered


def _loaded(path: Path) -> Any:
    return with_rank_files(torch.load(path, weights_only=True)["tracker"], path)


def _rank_file(path: Path, rank: int) -> Path:
    index = torch.load(path, weights_only=True)["tracker"]["ranks"]
    return path.parent / index["rank_files"] / f"rank-{rank}.json"


def test_the_checkpoint_keeps_rank_0s_entry_and_an_index_of_constant_size(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    path, gathered = saved
    entry = torch.load(path, weights_only=True)["tracker"]

    assert set(entry["ranks"]) == {"rank_files", "world_size", "save_id", "written_in"}
    assert entry["ranks"]["world_size"] == 2
    assert {k: v for k, v in entry.items() if k != "ranks"} == gathered["ranks"][0]
    assert json.loads(json.dumps(entry)) == entry  # the checkpoint's entry stays plain JSON


def test_each_ranks_file_gives_back_its_entry(saved: tuple[Path, dict[str, Any]]) -> None:
    path, gathered = saved

    assert list(_loaded(path)["ranks"]) == gathered["ranks"]


def test_a_missing_rank_file_is_refused_naming_the_rank_and_the_file(saved: tuple[Path, dict[str, Any]]) -> None:
    path, _ = saved
    _rank_file(path, 1).unlink()

    with pytest.raises(ProgressStateError, match=r"'ranks\.1'.*rank-1\.json: missing"):
        _loaded(path)["ranks"][1]


def test_a_checkpoint_moved_without_its_rank_files_is_refused_saying_where_they_were_looked_for(
    saved: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = saved
    moved = tmp_path / "elsewhere" / "moved.ckpt"
    moved.parent.mkdir()
    shutil.move(path, moved)
    shutil.rmtree(path.parent / "checkpoint.ckpt.ranks")

    with pytest.raises(ProgressStateError, match=r"'ranks'.*not found; looked in .*moved\.ckpt\.ranks"):
        _loaded(moved)


def test_rank_files_are_found_in_a_folder_the_adapter_names(saved: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, gathered = saved
    entry = torch.load(path, weights_only=True)["tracker"]
    shutil.move(path.parent / "checkpoint.ckpt.ranks", tmp_path / "run" / "checkpoint.ckpt.ranks")

    found = with_rank_files(entry, None, folders=[tmp_path / "run"])

    assert list(found["ranks"]) == gathered["ranks"]  # type: ignore[index]


def test_a_changed_value_in_a_rank_file_is_refused_by_its_digest(saved: tuple[Path, dict[str, Any]]) -> None:
    path, _ = saved
    file = _rank_file(path, 1)
    document = json.loads(file.read_text())
    document["entry"]["progress"]["stages"]["train"]["batches"]["run"]["completed"] += 1
    file.write_text(json.dumps(document))

    with pytest.raises(ProgressStateError, match=r"'ranks\.1'.*does not match its sha256"):
        _loaded(path)["ranks"][1]


def test_a_rank_file_copied_from_another_rank_is_refused(saved: tuple[Path, dict[str, Any]]) -> None:
    path, _ = saved
    shutil.copy(_rank_file(path, 0), _rank_file(path, 1))

    with pytest.raises(ProgressStateError, match=r"'ranks\.1'.*written for rank 0 of 2"):
        _loaded(path)["ranks"][1]


def test_an_index_loaded_without_its_rank_files_is_refused_saying_how_to_read_them(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = saved
    entry = torch.load(path, weights_only=True)["tracker"]

    with pytest.raises(ProgressStateError, match=r"'ranks'.*with_rank_files"):
        Tracker().load_state_dict(entry)


def test_an_elastic_resume_from_rank_files_maps_as_from_the_entries_reading_only_the_rank_it_maps_from(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    path, gathered = saved
    loaders = [_loader(0, world=1) for _ in range(2)]  # kept: a tracker holds its loaders weakly
    good, resumed = Tracker(), Tracker()
    for tracker, loader in zip((good, resumed), loaders, strict=True):
        tracker.track_train_loader(loader)
    good.load_state_dict(gathered)
    loaded = _loaded(path)

    resumed.load_state_dict(loaded)

    assert resumed.view.resume_mapping == good.view.resume_mapping is not None
    assert sorted(loaded["ranks"]._read) == [0]  # rank 0 of 1 maps from saved rank 0; the other file is not read


def test_an_index_of_an_earlier_version_with_its_train_loader_summaries_is_read_ignoring_them(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    path, gathered = saved
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["tracker"]["ranks"]["loaders"] = [{"consumed_min": 3}]  # what it held is not read
    torch.save(checkpoint, path)

    assert list(_loaded(path)["ranks"]) == gathered["ranks"]


def test_a_damaged_file_of_the_rank_an_elastic_resume_maps_from_applies_nothing(
    saved: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = saved
    fresh, loader = Tracker(), _loader(0, world=1)
    fresh.track_train_loader(loader)
    file = _rank_file(path, 0)
    file.write_text(file.read_text()[:-10])
    before = torch.get_rng_state()

    with pytest.raises(ProgressStateError, match=r"'ranks\.0'.*not JSON"):
        fresh.load_state_dict(_loaded(path))
    assert fresh.view.train.batches.lifetime.completed == 0
    assert torch.equal(torch.get_rng_state(), before)


def test_the_index_does_not_grow_with_the_ranks() -> None:
    sizes = [
        len(json.dumps(write_rank_files(_gathered(world), Path(tempfile.mkdtemp()) / "c.pt")["ranks"]))
        for world in (2, 4)
    ]
    assert sizes[1] == sizes[0]


def test_a_new_save_of_the_same_checkpoint_removes_the_older_rank_files(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    first = write_rank_files(_gathered(2), path)["ranks"]["save_id"]
    second = write_rank_files(_gathered(2), path)["ranks"]["save_id"]

    remove_other_saves(path, second)

    assert [p.name for p in (tmp_path / "last.ckpt.ranks").iterdir()] == [second] != [first]


def test_rank_files_at_an_fsspec_url_are_written_and_read_through_fsspec() -> None:
    url = "memory://rank-files-test/checkpoint.ckpt"
    gathered = _gathered(2)
    split = write_rank_files(gathered, url)
    buffer = io.BytesIO()
    torch.save({"tracker": split}, buffer)
    buffer.seek(0)

    entry = with_rank_files(torch.load(buffer, weights_only=True)["tracker"], url)

    assert isinstance(entry, dict) and isinstance(entry["ranks"], RankFiles)
    assert list(entry["ranks"]) == gathered["ranks"]
    remove_other_saves(url, None)


def test_rank_files_of_a_file_url_are_written_beside_the_checkpoint_and_read_back(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/checkpoint.ckpt"
    gathered = _gathered(2)
    split = write_rank_files(gathered, url)

    entry = with_rank_files(split, url)

    assert (tmp_path / "checkpoint.ckpt.ranks").is_dir()
    assert list(entry["ranks"]) == gathered["ranks"]


def _resume_from_files(folder: str, rank: int) -> dict[str, Any]:
    """Rank ``rank`` of 2 saves (the writer writes the rank files), then resumes reading its own file only."""
    import torch.distributed as dist

    torch.manual_seed(rank)
    tracker, _loader_kept, rest = trained(3, _stateful_loader(rank))
    entry = tracker.gathered_state_dict()
    path = Path(folder) / "checkpoint.ckpt"
    if rank == 0:
        torch.save({"tracker": write_rank_files(entry, path)}, path)
    dist.barrier()
    loaded = _loaded(path)
    resumed, again = Tracker(), _stateful_loader(rank)
    resumed.track_train_loader(again)
    resumed.load_state_dict(loaded)
    return {
        "files_read": sorted(loaded["ranks"]._read),
        "bytes_read": loaded["ranks"].bytes_read,
        "exact": [batch[0].tolist() for batch in again] == [batch[0].tolist() for batch in rest],
    }


@functools.cache
def _two_ranks(folder: str) -> list[dict[str, Any]]:
    return run_on_two_ranks(functools.partial(_resume_from_files, folder))


def test_each_rank_of_a_stateful_dataloader_resumes_exactly_reading_only_its_own_rank_file(tmp_path: Path) -> None:
    results = _two_ranks(str(tmp_path))

    assert [result["files_read"] for result in results] == [[0], [1]]
    assert [result["exact"] for result in results] == [True, True]
    assert all(0 < result["bytes_read"] < 16 * 1024 for result in results)


def test_inspect_reads_the_rank_files_of_a_checkpoint_at_an_fsspec_url() -> None:
    import fsspec

    url = "memory://rank-files-inspect/checkpoint.pt"
    gathered = _gathered(2)
    with fsspec.open(url, "wb") as stream:
        torch.save({"progress_tracker": write_rank_files(gathered, url)}, stream)

    checkpoint = read_checkpoint(url)

    assert checkpoint.entries == tuple(gathered["ranks"])
    assert checkpoint.rank_files == "memory://rank-files-inspect/checkpoint.pt.ranks/" + checkpoint.rank_files[-32:]
    remove_other_saves(url, None)


def test_each_ranks_tensors_are_read_from_their_own_file_and_a_missing_one_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "checkpoint.ckpt"
    save_id = write_rank_files(_gathered(2), path)["ranks"]["save_id"]
    index = write_rank_tensors([[torch.ones(2)], [torch.zeros(2)]], path, save_id, "gradients")
    (tmp_path / index["rank_files"] / "gradients-1.pt").unlink()

    tensors = RankTensors.of(index, path, key="gradients.ranks")

    assert torch.equal(tensors[0][0], torch.ones(2))
    with pytest.raises(ProgressStateError, match=r"'gradients\.ranks\.1'.*gradients-1\.pt: missing"):
        tensors[1]
