"""``progress-tracker inspect`` / ``diff`` and ``newest_intact_checkpoint`` on checkpoints real frameworks wrote.

The checkpoints (tests/helpers/saved_checkpoints.py) are written once per session: Lightning,
Ignite and Accelerate runs training Linear(4, 1) for 2 epochs of 4 batches, 2 batches per
optimizer step, and a 2-process Accelerate save. Tests copy what they damage.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import torch

from tracker_core.checkpoints import CheckpointFileError, newest_intact_checkpoint, read_checkpoint
from tracker_core.cli import main
from tracker_core.integrations.lightning import STATE_KEY

from helpers.saved_checkpoints import EPOCHS, Saved, saved_checkpoints, two_rank_accelerate_folder

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated", "ignore::UserWarning:pytorch_lightning")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    return saved_checkpoints(tmp_path_factory)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_rank_accelerate_folder(tmp_path_factory)


def _inspect_json(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["inspect", str(path), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def _copy(path: Path, tmp_path: Path) -> Path:
    target = tmp_path / path.name
    if path.is_dir():
        shutil.copytree(path, target)
    else:
        shutil.copy(path, target)
    return target


def _cut_in_half(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


# inspect ------------------------------------------------------------------------------------
def test_inspect_a_lightning_checkpoint_prints_the_table_where_it_was_taken_and_mid_epoch(
    saved: Saved, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(saved.lightning / "step=1.ckpt")]) == 0
    out = capsys.readouterr().out
    assert "Lightning checkpoint" in out and f"checkpoint['callbacks']['{STATE_KEY}']" in out
    assert ["stage", "count", "epoch", "run", "lifetime"] in [line.split() for line in out.splitlines()]
    assert "optimizer steps  1" in out
    assert "samples/s" in out and "seconds over the lifetime: checkpoint saves" in out
    assert "taken at: train batch" in out and "global step: 1" in out
    assert "mid-epoch: yes, 2 batches into train epoch 0" in out and "mid-accumulation: no" in out


def test_inspect_an_ignite_checkpoint_says_mid_accumulation(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved.ignite / "checkpoint_3.pt")]) == 0
    out = capsys.readouterr().out
    assert "Ignite checkpoint" in out and "checkpoint['progress']['progress_tracker']" in out
    assert "mid-epoch: yes, 3 batches into train epoch 0" in out
    assert "mid-accumulation: yes, 1 batch not yet applied" in out


def test_inspect_an_accelerate_folder_prints_rank_0(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(saved.accelerate / "mid")]) == 0
    out = capsys.readouterr().out
    assert "Accelerate checkpoint folder" in out and "progress_tracker_<rank>.pt['tracker']" in out
    assert "ranks" not in out.splitlines()[2]
    assert "mid-accumulation: yes, 1 batch not" in out


def test_inspect_json_holds_format_path_progress_and_facts(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    path = saved.ignite / "checkpoint_3.pt"
    data = _inspect_json(path, capsys)
    assert set(data) == {"path", "format", "location", "num_ranks", "progress", "facts", "device_rng", "ranks"}
    assert (data["path"], data["format"], data["num_ranks"]) == (str(path), "ignite", 1)
    entry = torch.load(path, weights_only=True)["progress"]["progress_tracker"]
    assert data["progress"] == entry["progress"]
    assert data["facts"] == {
        "taken_at": data["facts"]["taken_at"],
        "run_kind": "fit",
        "global_step": 1,
        "epoch_index": 0,
        "batches_into_epoch": 3,
        "mid_epoch": True,
        "mid_accumulation": True,
        "accumulating_batches": 1,
        "anomalies": [],
    }
    assert data["device_rng"] == []  # saved on a CPU-only machine
    assert data["ranks"] == [
        {"rank": 0, "progress": data["progress"], "facts": data["facts"], "device_rng": data["device_rng"]}
    ]


@pytest.mark.parametrize(
    ("relative", "fmt"),
    [
        ("lightning/final.ckpt", "lightning"),
        ("ignite/final_checkpoint_0.pt", "ignite"),
        ("accelerate/end", "accelerate"),
    ],
)
def test_inspect_detects_the_format_and_reads_a_finished_fit(
    relative: str, fmt: str, saved: Saved, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _inspect_json(saved.lightning.parent / relative, capsys)
    assert data["format"] == fmt
    assert data["facts"]["global_step"] == EPOCHS * 2 and not data["facts"]["mid_epoch"]
    assert data["progress"]["stages"]["train"]["batches"]["run"]["completed"] == EPOCHS * 4


def test_inspect_json_of_an_accelerate_folder_gives_every_rank(
    two_ranks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _inspect_json(two_ranks, capsys)
    assert data["num_ranks"] == 2 and [r["rank"] for r in data["ranks"]] == [0, 1]
    assert main(["inspect", str(two_ranks)]) == 0
    assert "2 ranks; showing rank 0" in capsys.readouterr().out


def test_a_two_rank_accelerate_folder_missing_rank_1s_files_is_refused(
    two_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(two_ranks, tmp_path)
    (folder / "progress_tracker_1.pt").unlink()
    (folder / "random_states_1.pkl").unlink()
    assert "saved by 2 process(es), but the progress file of rank(s) [1] is missing" in _error(
        ["inspect", str(folder)], capsys
    )


def test_a_two_rank_accelerate_folder_missing_rank_1s_random_states_is_refused(
    two_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(two_ranks, tmp_path)
    (folder / "random_states_1.pkl").unlink()
    assert "random_states_1.pkl" in _error(["inspect", str(folder)], capsys)


def test_a_per_rank_file_copied_over_another_ranks_is_refused(
    two_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(two_ranks, tmp_path)
    shutil.copy(folder / "progress_tracker_0.pt", folder / "progress_tracker_1.pt")
    err = _error(["inspect", str(folder)], capsys)
    assert "parts of this folder come from different saves" in err and "progress_tracker_1.pt is longer" in err


def test_a_progress_file_of_a_rank_beyond_the_saved_world_is_refused(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    shutil.copy(folder / "progress_tracker_0.pt", folder / "progress_tracker_1.pt")
    shutil.copy(folder / "random_states_0.pkl", folder / "random_states_1.pkl")
    err = _error(["inspect", str(folder)], capsys)
    assert "saved by 1 process(es), but progress files of rank(s) [1] belong to no rank of that save" in err


def test_weights_from_another_save_of_the_same_run_are_refused(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "end", tmp_path)
    shutil.copy(saved.accelerate / "mid" / "model.safetensors", folder / "model.safetensors")
    err = _error(["inspect", str(folder)], capsys)
    assert "parts of this folder come from different saves" in err and "model.safetensors" in err


def test_an_optimizer_state_from_another_save_of_the_same_run_is_refused(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "end", tmp_path)
    shutil.copy(saved.accelerate / "mid" / "optimizer.bin", folder / "optimizer.bin")
    err = _error(["inspect", str(folder)], capsys)
    assert "parts of this folder come from different saves" in err and "optimizer.bin" in err


def test_inspect_a_file_saved_by_several_ranks_shows_rank_0_and_gives_every_rank_in_json(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = torch.load(saved.lightning / "step=2.ckpt", weights_only=True)
    rank_1 = torch.load(saved.lightning / "step=1.ckpt", weights_only=True)["callbacks"][STATE_KEY]
    rank_0 = checkpoint["callbacks"][STATE_KEY]
    checkpoint["callbacks"][STATE_KEY] = {**rank_0, "ranks": [rank_0, rank_1]}  # Tracker.gathered_state_dict()
    path = tmp_path / "two_ranks.ckpt"
    torch.save(checkpoint, path)
    data = _inspect_json(path, capsys)
    assert data["num_ranks"] == 2 and [r["facts"]["global_step"] for r in data["ranks"]] == [2, 1]
    assert main(["inspect", str(path)]) == 0
    assert "2 ranks; showing rank 0" in capsys.readouterr().out


# errors -------------------------------------------------------------------------------------
def test_a_file_without_progress_names_the_file_and_what_was_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"model": torch.nn.Linear(4, 1).state_dict()}, path)
    err = _error(["inspect", str(path)], capsys)
    assert str(path) in err and "no progress entry" in err
    assert "checkpoint['callbacks']['ProgressTracker']" in err and "'progress_tracker', 'gradients'" in err


def test_a_lightning_checkpoint_without_the_callback_says_so(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = torch.load(saved.lightning / "final.ckpt", weights_only=True)
    del checkpoint["callbacks"][STATE_KEY]
    path = tmp_path / "plain.ckpt"
    torch.save(checkpoint, path)
    assert "Lightning checkpoint without a progress entry" in _error(["inspect", str(path)], capsys)


def test_a_folder_without_progress_files_says_what_was_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "progress_tracker_<rank>.pt" in _error(["inspect", str(tmp_path)], capsys)


def test_a_damaged_entry_gives_the_cores_message_naming_the_key(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = torch.load(saved.lightning / "step=1.ckpt", weights_only=True)
    checkpoint["callbacks"][STATE_KEY]["progress"]["stages"]["train"]["batches"]["run"]["ready"] = -3
    path = tmp_path / "damaged.ckpt"
    torch.save(checkpoint, path)
    err = _error(["inspect", str(path)], capsys)
    assert str(path) in err and "damaged progress entry" in err and "progress.stages.train.batches.run.ready" in err


def test_a_damaged_rank_of_a_gathered_entry_is_named(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = torch.load(saved.lightning / "step=1.ckpt", weights_only=True)
    entry = checkpoint["callbacks"][STATE_KEY]
    checkpoint["callbacks"][STATE_KEY] = {**entry, "ranks": [entry, {**entry, "rng": None}]}
    path = tmp_path / "damaged_rank.ckpt"
    torch.save(checkpoint, path)
    err = _error(["inspect", str(path)], capsys)
    assert "['ranks'][1]" in err and "'rng'" in err


def test_a_damaged_accelerate_progress_file_names_the_key(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    payload = torch.load(folder / "progress_tracker_0.pt", weights_only=True)
    payload["tracker"]["progress"]["run"]["kind"] = "dance"
    torch.save(payload, folder / "progress_tracker_0.pt")
    err = _error(["inspect", str(folder)], capsys)
    assert "progress_tracker_0.pt" in err and "progress.run.kind" in err


@pytest.mark.parametrize("relative", ["lightning/step=2.ckpt", "ignite/checkpoint_5.pt"])
def test_a_truncated_file_is_named_as_truncated(
    relative: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _copy(saved.lightning.parent / relative, tmp_path)
    _cut_in_half(path)
    err = _error(["inspect", str(path)], capsys)
    assert str(path) in err and "truncated or not a torch checkpoint" in err


def test_an_accelerate_folder_with_a_truncated_progress_file_is_named_as_truncated(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    _cut_in_half(folder / "progress_tracker_0.pt")
    err = _error(["inspect", str(folder)], capsys)
    assert str(folder / "progress_tracker_0.pt") in err and "truncated" in err


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin"])
def test_an_accelerate_folder_with_a_file_cut_after_the_commit_names_it_and_its_size(
    name: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    size = (folder / name).stat().st_size
    _cut_in_half(folder / name)
    with pytest.raises(CheckpointFileError, match=f"{name} is truncated: {size // 2} bytes, the save wrote {size}"):
        read_checkpoint(folder)
    assert name in _error(["inspect", str(folder)], capsys)  # inspect then reads it as weights: also truncated


def test_an_accelerate_folder_missing_a_file_its_save_wrote_says_so(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    (folder / "random_states_0.pkl").unlink()
    assert "random_states_0.pkl, which the save wrote, is missing" in _error(["inspect", str(folder)], capsys)


def test_an_accelerate_folder_whose_save_was_cut_short_before_its_commit_says_so(
    two_ranks: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(two_ranks, tmp_path)
    (folder / "progress_tracker_0.pt").unlink()  # rank 1 wrote its file; rank 0's commit never came
    assert "was cut short before a registered AcceleratorProgress wrote it" in _error(["inspect", str(folder)], capsys)


def test_inspect_names_the_files_written_after_the_commit_as_not_checked(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(saved.accelerate / "mid", tmp_path)
    (folder / "notes.txt").write_text("added after the save")
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "not checked: notes.txt (not in the folder when the save committed" in out
    assert "not checked: custom_checkpoint_0.pkl" in out  # the registered progress's note, written after it


def test_a_file_holding_pickled_objects_is_refused_without_running_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "objects.pt"
    torch.save({"when": __import__("datetime").date(2020, 1, 1)}, path)
    assert "weights_only=True" in _error(["inspect", str(path)], capsys)


def test_a_missing_path_and_bad_arguments_exit_with_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such file" in _error(["inspect", str(tmp_path / "nothing.ckpt")], capsys)
    assert main(["frobnicate"]) == 2


def test_a_reader_that_stops_reading_ends_the_command_quietly(
    saved: Saved, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = (tmp_path / "sink").open("w")

    class ClosedPipe(io.StringIO):  # what `progress-tracker inspect ... | head` writes to once head is done
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return sink.fileno()

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["inspect", "--json", str(saved.ignite / "checkpoint_4.pt")]) == 1
    assert capsys.readouterr().err == ""
    sink.close()


# diff ---------------------------------------------------------------------------------------
def test_diff_of_identical_progress_exits_0(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(saved.ignite / "checkpoint_4.pt")
    assert main(["diff", path, path]) == 0
    assert "identical progress" in capsys.readouterr().out


def test_diff_prints_each_differing_key_with_both_values_and_exits_1(
    saved: Saved, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = saved.ignite / "checkpoint_3.pt", saved.ignite / "checkpoint_4.pt"
    assert main(["diff", str(a), str(b)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["key", str(a), str(b)]
    assert ["stages.train.batches.run.completed", "3", "4"] in [line.split() for line in lines]
    assert ["stages.train.accumulating_batches", "1", "0"] in [line.split() for line in lines]


def test_diff_across_formats_compares_the_numbers(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    lightning, ignite = saved.lightning / "final.ckpt", saved.ignite / "final_checkpoint_0.pt"
    code = main(["diff", str(lightning), str(ignite)])
    out = capsys.readouterr().out
    assert code == 0, out


def test_diff_leaves_out_wall_clock_times_and_the_run_ledger(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def later(value: Any, key: str = "") -> Any:  # the same training, timed otherwise (its ledger too)
        if isinstance(value, dict):
            return {k: v if k == "lost" else later(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [later(item) for item in value]
        return value + 7 if key.endswith("microseconds") and isinstance(value, int) else value

    path = saved.ignite / "checkpoint_4.pt"
    torch.save(later(torch.load(path, weights_only=True)), tmp_path / "timed_otherwise.pt")
    assert main(["diff", str(path), str(tmp_path / "timed_otherwise.pt")]) == 0, capsys.readouterr()


def test_diff_of_a_damaged_checkpoint_exits_2(saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(saved.ignite / "checkpoint_2.pt", tmp_path)
    _cut_in_half(path)
    assert "truncated" in _error(["diff", str(saved.ignite / "checkpoint_2.pt"), str(path)], capsys)


# newest_intact_checkpoint ----------------------------------------------------------------------
def _aged(files: list[Path]) -> None:
    """Modification times one second apart, in list order (the kernel's clock may tie fast saves)."""
    for age, file in enumerate(reversed(files)):
        os.utime(file, (1_700_000_000 - age, 1_700_000_000 - age))


def test_newest_intact_checkpoint_skips_a_truncated_newest_file_with_a_warning(saved: Saved, tmp_path: Path) -> None:
    files = [_copy(saved.ignite / f"checkpoint_{i}.pt", tmp_path) for i in (6, 7, 8)]
    _cut_in_half(files[-1])
    _aged(files)
    skipped = r"skipped a checkpoint newer than .*checkpoint_7\.pt: .*checkpoint_8\.pt: truncated"
    with pytest.warns(UserWarning, match=skipped):
        assert newest_intact_checkpoint(tmp_path) == files[1]


def test_newest_intact_checkpoint_takes_the_newest_of_intact_files_silently(saved: Saved) -> None:
    files = sorted(saved.lightning.glob("step=*.ckpt"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chosen = newest_intact_checkpoint([*files, saved.lightning / "final.ckpt"])
    assert chosen.name in {"final.ckpt", "step=4.ckpt"}  # saved at the same step, maybe the same instant


def test_newest_intact_checkpoint_skips_an_accelerate_folder_whose_save_was_cut_short(
    saved: Saved, tmp_path: Path
) -> None:
    older = _copy(saved.accelerate / "mid", tmp_path / "checkpoints")
    newer = _copy(saved.accelerate / "end", tmp_path / "checkpoints")
    _cut_in_half(newer / "model.safetensors")
    (tmp_path / "checkpoints" / "logs").mkdir()
    (tmp_path / "checkpoints" / "logs" / "events.txt").write_text("not a checkpoint")
    _aged([*older.iterdir(), *newer.iterdir(), tmp_path / "checkpoints" / "logs" / "events.txt"])
    with pytest.warns(UserWarning, match="model.safetensors is truncated") as skipped:
        assert newest_intact_checkpoint(tmp_path / "checkpoints") == older
    assert len(skipped) == 1  # the folder without progress files is no candidate


def test_newest_intact_checkpoint_breaks_a_modification_time_tie_by_the_number_in_the_name(
    saved: Saved, tmp_path: Path
) -> None:
    files = [shutil.copy(saved.ignite / "checkpoint_1.pt", tmp_path / f"checkpoint_{i}.pt") for i in (9, 10)]
    for file in files:
        os.utime(file, (1_700_000_000, 1_700_000_000))
    assert newest_intact_checkpoint(tmp_path) == tmp_path / "checkpoint_10.pt"


def test_newest_intact_checkpoint_raises_naming_every_candidate_when_none_is_intact(
    saved: Saved, tmp_path: Path
) -> None:
    files = [_copy(saved.ignite / f"checkpoint_{i}.pt", tmp_path) for i in (1, 2)]
    for file in files:
        _cut_in_half(file)
    with pytest.raises(CheckpointFileError, match="no intact checkpoint") as raised:
        newest_intact_checkpoint(files)
    assert all(str(file) in str(raised.value) for file in files)


def test_newest_intact_checkpoint_of_a_directory_without_checkpoints_raises(tmp_path: Path) -> None:
    with pytest.raises(CheckpointFileError, match=f"no checkpoint found in {tmp_path}"):
        newest_intact_checkpoint(tmp_path)


def test_read_checkpoint_returns_the_validated_entries(saved: Saved) -> None:
    checkpoint = read_checkpoint(saved.accelerate / "end")
    assert checkpoint.format == "accelerate" and len(checkpoint.entries) == 1
    assert set(checkpoint.entries[0]) == {"progress", "train_loaders", "rng"}


# the console script -----------------------------------------------------------------------------
def test_the_installed_console_script_runs_inspect(saved: Saved) -> None:
    script = Path(sys.executable).parent / "progress-tracker"
    done = subprocess.run([str(script), "inspect", str(saved.lightning / "final.ckpt")], capture_output=True, text=True)
    assert done.returncode == 0 and "Lightning checkpoint" in done.stdout
