"""One scenario, three frameworks, one progress record: Lightning, Ignite and Accelerate agree.

Each scenario is trained under the three adapters. Uninterrupted, the three progress states
are equal (same schema, same numbers, tokens too: one scenario's batches carry them). Stopped
right after a mid-epoch checkpoint and resumed into fresh objects (seeded differently, in the same process), each framework ends exactly as
its uninterrupted run: same sample ids in the same order, bit-identical weights, same progress,
hence the same progress as the other two frameworks. The resumed runs' ledgers agree too: the same
entries (kind, world size, global batch size, accumulation, start and end counts, how they ended), the
stopped entry's ending aside, which each framework learns in its own way (see STOPPED_ENTRY).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")
pytest.importorskip("numpy")
pytest.importorskip("torchdata")

import torch

from tracker_core import Progress

from helpers.conformance import FRAMEWORKS, TOKENS_PER_SAMPLE, Outcome, Saving, Scenario, run, stop_checkpoint
from helpers.ledger import without_ledger, without_ledger_times

pytestmark = [
    pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning"),
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
]

SCENARIOS = [
    Scenario("validate-every-epoch", samples=10, batch_size=3, epochs=2, validate_every=4, stop=(1, 2)),
    Scenario("accumulate-2-validate-every-2", samples=10, batch_size=3, accumulation=2, validate_every=2, stop=(1, 1)),
    Scenario("accumulate-3-no-validation", samples=13, batch_size=4, epochs=3, accumulation=3, stop=(1, 2)),
    Scenario(
        "validate-mid-epoch-then-test-tokens",
        samples=11,
        batch_size=2,
        validate_every=3,
        test_after=True,
        stop=(0, 4),
        tokens=True,
    ),
    Scenario("stop-after-first-batch", samples=10, batch_size=3, accumulation=2, validate_every=4, stop=(0, 1)),
]
_references: dict[tuple[str, Scenario], Outcome] = {}
_resumed: dict[tuple[str, Scenario], Outcome] = {}
# How the stop ended the stopped run's ledger entry, and its lost work (times aside). Lightning and Ignite stop by an
# exception after the checkpoint, saved by hand (trainer.save_checkpoint; a Checkpoint called directly); Accelerate
# returns from the loop before its last epoch, which stops its fit early there. No run names a heartbeat file: the
# resume settles the entry crashed, its lost work unknown.
# (Each adapter ends a run stopped by its own means stopped_early and one an exception ends crashed: tests
# test_ledger_adapters, test_accelerate_ledger; without a heartbeat a resume cannot know how the process ended.)
STOPPED_ENTRY = {
    "lightning": ("crashed", "unknown"),
    "ignite": ("crashed", "unknown"),
    "accelerate": ("crashed", "unknown"),
}


def _reference(framework: str, scenario: Scenario) -> Outcome:
    if (framework, scenario) not in _references:
        _references[framework, scenario] = run(framework, scenario)
    return _references[framework, scenario]


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Key paths where two plain states differ."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for key in a for d in _differences(a[key], b[key], f"{path}.{key}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}.{i}")]
    return [] if a == b else [path]


def _saved_progress(framework: str, path: Path) -> dict[str, Any]:
    if framework == "lightning":
        return torch.load(path, weights_only=True)["callbacks"]["ProgressTracker"]["progress"]
    if framework == "ignite":
        return torch.load(path, weights_only=True)["progress"]["progress_tracker"]["progress"]
    return torch.load(path / "progress_tracker_0.pt", weights_only=True)["tracker"]["progress"]


def _loaded(state: dict[str, Any]) -> dict[str, Any]:
    progress = Progress()
    progress.load_state_dict(state)
    return progress.state_dict()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_uninterrupted_runs_record_the_same_progress_in_all_three_frameworks(scenario: Scenario) -> None:
    lightning, ignite, accelerate = (_reference(f, scenario).progress for f in FRAMEWORKS)
    assert _differences(lightning, ignite) == []
    assert _differences(lightning, accelerate) == []
    assert lightning["where"] == {"stage": "", "event": "run", "phase": "completed"}
    assert lightning["run"]["kind"] == ("test" if scenario.test_after else "fit")


def test_the_three_frameworks_count_the_tokens_of_every_stage_from_the_batches() -> None:
    (scenario,) = (s for s in SCENARIOS if s.tokens)  # the uninterrupted runs above compare them across frameworks
    stages = _reference("lightning", scenario).progress["stages"]
    non_padding = sum(TOKENS_PER_SAMPLE - i % 4 for i in range(scenario.samples))
    assert stages["train"]["tokens"]["lifetime"] == scenario.epochs * scenario.samples * TOKENS_PER_SAMPLE
    assert stages["train"]["non_padding_tokens"]["lifetime"] == scenario.epochs * non_padding
    assert stages["validate"]["tokens"]["lifetime"] == 4 * 5 * TOKENS_PER_SAMPLE  # 2 validations an epoch of 5
    assert stages["test"]["non_padding_tokens"]["lifetime"] == sum(TOKENS_PER_SAMPLE - i % 4 for i in range(5))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_run_resumed_from_a_mid_epoch_checkpoint_equals_the_uninterrupted_run(
    scenario: Scenario, framework: str, tmp_path: Path
) -> None:
    reference = _reference(framework, scenario)
    stopped = run(framework, scenario, saving=Saving(tmp_path))
    resumed = run(framework, scenario, resume_from=stop_checkpoint(framework, tmp_path), seed=1234)
    _resumed[framework, scenario] = resumed
    assert len(stopped.ids) == scenario.stop_batch
    assert stopped.ids + resumed.ids == reference.ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert _differences(without_ledger(resumed.progress), without_ledger(reference.progress)) == []
    for other in FRAMEWORKS:
        assert (
            _differences(without_ledger(resumed.progress), without_ledger(_reference(other, scenario).progress)) == []
        )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_mid_epoch_checkpoints_hold_the_same_progress_once_loaded(scenario: Scenario, tmp_path: Path) -> None:
    saved = {}
    for framework in FRAMEWORKS:
        run(framework, scenario, saving=Saving(tmp_path / framework))
        saved[framework] = _saved_progress(framework, stop_checkpoint(framework, tmp_path / framework))
    # Lightning saves in on_train_batch_end and Accelerate in the loop body: the batch is processed,
    # not yet completed. Ignite's Checkpoint runs on ITERATION_COMPLETED, after it completed. That is
    # the only difference, and loading settles a processed batch as completed.
    in_flight = {
        ".stages.train.batches.epoch.completed",
        ".stages.train.batches.run.completed",
        ".stages.train.batches.lifetime.completed",
        ".where.phase",
    }
    assert _differences(saved["lightning"], saved["accelerate"]) == []
    assert set(_differences(saved["lightning"], saved["ignite"])) == in_flight
    assert saved["lightning"]["where"]["phase"] == "processed" and saved["ignite"]["where"]["phase"] == "completed"
    loaded = {framework: _loaded(state) for framework, state in saved.items()}
    assert _differences(loaded["lightning"], loaded["ignite"]) == []
    assert _differences(loaded["lightning"], loaded["accelerate"]) == []


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_resumed_runs_record_the_same_ledger_in_all_three_frameworks(scenario: Scenario, tmp_path: Path) -> None:
    ledgers = {}
    for framework in FRAMEWORKS:
        if (framework, scenario) not in _resumed:  # the resume test above ran elsewhere (another worker)
            run(framework, scenario, saving=Saving(tmp_path / framework))
            checkpoint = stop_checkpoint(framework, tmp_path / framework)
            _resumed[framework, scenario] = run(framework, scenario, resume_from=checkpoint, seed=1234)
        ledgers[framework] = without_ledger_times(_resumed[framework, scenario].progress["ledger"]["runs"])
    for framework, runs in ledgers.items():
        stopped = runs[0]
        assert (stopped["ended"], stopped["lost"]) == STOPPED_ENTRY[framework], framework
        runs[0] = {**stopped, "ended": "(how the stop ended)", "lost": "(what it lost)"}
    assert ledgers["lightning"] == ledgers["ignite"]
    assert ledgers["lightning"] == ledgers["accelerate"]
    fit, resumed, *test = ledgers["lightning"]
    assert (fit["kind"], fit["start"]["batches"], fit["end"]["batches"]) == ("fit", 0, scenario.stop_batch)
    assert (resumed["kind"], resumed["start"]["batches"], resumed["ended"]) == ("fit", scenario.stop_batch, "completed")
    assert resumed["end"]["batches"] == scenario.epochs * scenario.batches_per_epoch
    assert [(run["kind"], run["ended"]) for run in test] == ([("test", "completed")] if scenario.test_after else [])
    assert resumed["global_batch_size"] > 0 and resumed["accumulation"] > 0 and resumed["world_size"] == 1
