"""A reseed of the global RNG after ``fit(ckpt_path=...)`` restored it, before the first resumed batch, is named.

The tracker restores the global RNGs with its checkpoint entry; a ``torch.manual_seed`` (or
``seed_everything``) in a hook that runs after that makes the resumed run's random draws differ
from the uninterrupted run while the progress compares equal: one ``InexactResumeWarning``
says so. Both Lightning packages, with the real Trainer.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch

from tracker_core import InexactResumeWarning

from helpers.conformance_only import MARKS
from helpers.lightning_matrix import PACKAGES
from helpers.lightning_reseed import BATCHES, fit
from helpers.rng_warnings import rng_warnings

# Whole fits, many with loader worker processes: make test runs each case with one Lightning package, make
# conformance (TRACKER_MATRIX=full) with both.
SAMPLED_PACKAGES = [PACKAGES[0], pytest.param(PACKAGES[1], marks=MARKS)]

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MID_EPOCH = 1  # saved after train batch 1 of epoch 0
EPOCH_END = BATCHES - 1  # saved after the last batch of epoch 0: the resumed run begins epoch 1 (its sampler draws)
# saved there in on_train_batch_end, Lightning's resumed run skips epoch 1's on_train_epoch_start; in
# on_train_epoch_end (ModelCheckpoint without validation) it runs it
IN_EPOCH_END = {"in_epoch_end": True}
# a save inside an epoch resumes exactly from a torchdata StatefulDataLoader (a plain DataLoader's epoch is read from
# its start, warned): the mid-epoch cases train from one
STATEFUL: dict[str, Any] = {"kind": "stateful"}
_SETUP = "between the checkpoint load and Lightning's first train iterator"
_BOUNDARY = "in an on_train_start or on_train_epoch_start hook of a fit resumed at an epoch boundary"


def _resume(
    package: str, tmp_path: Path, save_at: int, reseed: str = "", draw_before: bool = False, **options: Any
) -> tuple[list[str], list[torch.Tensor]]:
    path = tmp_path / "saved.ckpt"
    fit(package, path, save_at=save_at, draw_before=draw_before, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = fit(package, path, reseed=reseed, draw_before=draw_before, **options)
    return rng_warnings(caught), weights


def _kind(save_at: int) -> dict[str, Any]:
    """The loader of a save at ``save_at``: a StatefulDataLoader inside an epoch, else the plain shuffled one."""
    return STATEFUL if save_at == MID_EPOCH else {}


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize(
    ("reseed", "save_at", "where"),
    [
        pytest.param("module.on_train_start", MID_EPOCH, "in an on_train_start hook", id="module-on_train_start"),
        pytest.param("callback.on_train_start", MID_EPOCH, "in an on_train_start hook", id="callback-on_train_start"),
        pytest.param("module.on_fit_start", MID_EPOCH, _SETUP, id="module-on_fit_start"),
        pytest.param("callback.on_fit_start", EPOCH_END, _SETUP, id="callback-on_fit_start-epoch-end"),
    ],
)
def test_a_reseed_after_the_load_before_the_first_resumed_batch_warns_once_naming_the_cause(
    package: str, reseed: str, save_at: int, where: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, save_at, reseed, **_kind(save_at))
    assert len(messages) == 1
    assert where in messages[0]
    assert "Seed before Trainer.fit(ckpt_path=...)" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "reseed", ["module.on_train_start", "callback.on_train_start", "early_callback.on_train_epoch_start"]
)
def test_a_reseed_in_a_start_hook_of_a_fit_resumed_at_an_epoch_boundary_warns_once_naming_the_cause(
    package: str, workers: int, reseed: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, workers=workers, **IN_EPOCH_END)
    assert len(messages) == 1
    assert _BOUNDARY in messages[0]
    assert "Seed before Trainer.fit(ckpt_path=...)" in messages[0]


LOADERS = {  # the train loaders of an epoch boundary resume whose iterator build draws from torch's global RNG
    "map-0-workers": {},
    "map-2-workers": {"workers": 2},
    "iterable": {"kind": "iterable"},
    "stateful": {"kind": "stateful"},
}


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("loader", list(LOADERS))
def test_a_per_epoch_torch_draw_in_the_modules_on_train_epoch_start_differs_after_an_epoch_boundary_resume_unnamed(
    package: str, loader: str, tmp_path: Path
) -> None:
    # Lightning builds the resumed epoch's iterator (its draws: worker seed, sampler) before the hook, the
    # uninterrupted run after it: the hook's draw, made in both runs, gets another value. A limit of the check
    # (docs/lightning.md): no callback hook runs between the module's on_train_epoch_start and the first fetch
    options: dict[str, Any] = {**LOADERS[loader], "draw_each_epoch": True}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, **options, **IN_EPOCH_END)
    assert not _equal(weights, straight)
    assert messages == []


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("loader", list(LOADERS))
@pytest.mark.parametrize("reseed", ["module.on_train_epoch_start", "callback.on_train_epoch_start"])
def test_a_reseed_in_on_train_epoch_start_of_the_module_or_a_later_callback_at_an_epoch_boundary_is_not_named(
    package: str, loader: str, reseed: str, tmp_path: Path
) -> None:
    # after the tracker's on_train_epoch_start the next callback hook comes after the first fetch, whose draws both
    # runs make: nothing is compared there (docs/lightning.md, "Where the start hooks are compared")
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, **LOADERS[loader], **IN_EPOCH_END)
    assert messages == []


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_per_epoch_draw_with_a_loader_of_its_own_generator_is_exact_and_silent_at_an_epoch_boundary(
    package: str, tmp_path: Path
) -> None:
    # the iterator draws nothing from the global RNG: the hook's draw gets the same value in both runs
    options: dict[str, Any] = {"own_generator": True, "draw_each_epoch": True}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, **options, **IN_EPOCH_END)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_an_ordinary_mid_epoch_resume_is_exact_and_silent(package: str, tmp_path: Path) -> None:
    straight = fit(package, tmp_path / "none.ckpt", **STATEFUL)
    messages, weights = _resume(package, tmp_path, MID_EPOCH, **STATEFUL)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("in_epoch_end", [False, True], ids=["on_train_batch_end", "on_train_epoch_end"])
def test_a_resume_at_an_epoch_boundary_where_the_sampler_draws_is_exact_and_silent(
    package: str, workers: int, in_epoch_end: bool, tmp_path: Path
) -> None:
    straight = fit(package, tmp_path / "none.ckpt", workers=workers)
    messages, weights = _resume(package, tmp_path, EPOCH_END, workers=workers, in_epoch_end=in_epoch_end)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize(
    ("save_at", "where"), [(MID_EPOCH, {}), (EPOCH_END, IN_EPOCH_END)], ids=["mid-epoch", "epoch-end"]
)
@pytest.mark.parametrize(
    ("workers", "draws"),
    [
        pytest.param(0, {"noisy_data": True}, id="dataset-0-workers"),
        pytest.param(0, {"draw_at_transfer": True}, id="on_after_batch_transfer-0-workers"),
        pytest.param(2, {"draw_at_transfer": True}, id="on_after_batch_transfer-2-workers"),
        pytest.param(0, {"noisy_data": True, "draw_before": True}, id="dataset-and-callback-before"),
    ],
)
def test_draws_of_every_batch_before_its_start_hooks_raise_no_false_alarm(
    package: str, save_at: int, where: dict[str, bool], workers: int, draws: dict[str, bool], tmp_path: Path
) -> None:
    # the loader reads the first resumed batch (its dataset's draws without workers) and Lightning moves it
    # to the device (on_after_batch_transfer) before on_train_batch_start, in both runs
    straight = fit(package, tmp_path / "none.ckpt", workers=workers, **_kind(save_at), **draws)
    messages, weights = _resume(package, tmp_path, save_at, workers=workers, **where, **_kind(save_at), **draws)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_callback_before_the_tracker_drawing_at_every_batch_start_raises_no_false_alarm(
    package: str, tmp_path: Path
) -> None:
    straight = fit(package, tmp_path / "none.ckpt", draw_before=True, **STATEFUL)
    messages, weights = _resume(package, tmp_path, MID_EPOCH, draw_before=True, **STATEFUL)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("reseeded", ["random", "numpy"])
@pytest.mark.parametrize(
    ("reseed", "where"),
    [
        pytest.param("module.on_train_start", "in an on_train_start hook", id="module-on_train_start"),
        pytest.param("callback.on_train_start", "in an on_train_start hook", id="callback-on_train_start"),
        pytest.param("early_callback.on_train_start", "in an on_train_start hook", id="early-callback"),
        pytest.param("module.on_fit_start", _SETUP, id="module-on_fit_start"),
    ],
)
def test_a_reseed_of_pythons_or_numpys_rng_alone_without_workers_warns_once_naming_the_cause(
    package: str, reseeded: str, reseed: str, where: str, tmp_path: Path
) -> None:
    # without workers the first resumed batch is compared where its sampler starts: every generator, not torch's alone
    messages, _ = _resume(package, tmp_path, MID_EPOCH, reseed, reseeded=reseeded, **STATEFUL)
    assert len(messages) == 1
    assert where in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("reseeded", ["torch", "random"])
def test_a_reseed_with_several_train_loaders_without_workers_warns_once(
    package: str, reseeded: str, tmp_path: Path
) -> None:
    messages, _ = _resume(
        package, tmp_path, MID_EPOCH, "module.on_train_start", reseeded=reseeded, loaders=2, **STATEFUL
    )
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("noisy_data", [False, True], ids=["plain", "dataset-draws"])
def test_a_mid_epoch_resume_of_several_train_loaders_without_workers_is_exact_and_silent(
    package: str, noisy_data: bool, tmp_path: Path
) -> None:
    # the first sampler start of the first batch comes before any loader's dataset draws, in both runs
    straight = fit(package, tmp_path / "none.ckpt", loaders=2, noisy_data=noisy_data, **STATEFUL)
    messages, weights = _resume(package, tmp_path, MID_EPOCH, loaders=2, noisy_data=noisy_data, **STATEFUL)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reseeded", ["random", "numpy"])
@pytest.mark.parametrize("reseed", ["module.on_train_start", "callback.on_train_start"])
def test_a_reseed_of_pythons_or_numpys_rng_in_on_train_start_of_a_fit_resumed_at_an_epoch_boundary_warns_once(
    package: str, workers: int, reseeded: str, reseed: str, tmp_path: Path
) -> None:
    # the early iterator drew from torch's RNG alone: the others must be as loaded once the on_train_start hooks ran
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, reseeded=reseeded, workers=workers, **IN_EPOCH_END)
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_reseed_in_on_train_start_with_a_loader_of_its_own_generator_at_an_epoch_boundary_warns_once(
    package: str, tmp_path: Path
) -> None:
    # the iterator drew nothing from the global RNG; on_train_start runs in the resumed run alone
    messages, _ = _resume(package, tmp_path, EPOCH_END, "module.on_train_start", own_generator=True, **IN_EPOCH_END)
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("drawn", ["random", "numpy"])
def test_a_per_epoch_draw_of_pythons_or_numpys_rng_after_an_epoch_boundary_resume_is_exact_and_silent(
    package: str, workers: int, drawn: str, tmp_path: Path
) -> None:
    # the early iterator drew from torch's RNG alone: the hook's draw of another generator gets the same value
    options: dict[str, Any] = {"workers": workers, "draw_each_epoch": drawn}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, **options, **IN_EPOCH_END)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_callback_before_the_tracker_drawing_in_on_train_epoch_start_raises_no_false_alarm_at_an_epoch_boundary(
    package: str, workers: int, tmp_path: Path
) -> None:
    # it draws there in both runs, before the tracker's on_train_epoch_start, which compares torch's RNG alone
    options: dict[str, Any] = {"workers": workers, "reseed": "early_callback.on_train_epoch_start"}
    straight = fit(package, tmp_path / "none.ckpt", reseeded="draw-random", **options)
    path = tmp_path / "saved.ckpt"
    fit(package, path, save_at=EPOCH_END, reseeded="draw-random", **options, **IN_EPOCH_END)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = fit(package, path, reseeded="draw-random", **options, **IN_EPOCH_END)
    assert rng_warnings(caught) == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reseeded", ["torch", "random"])
def test_a_reseed_in_on_train_start_of_a_callback_before_the_tracker_at_an_epoch_boundary_warns_once(
    package: str, workers: int, reseeded: str, tmp_path: Path
) -> None:
    # compared at the tracker's on_train_start with the RNGs as Lightning's early build of the iterator left them
    reseed = "early_callback.on_train_start"
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, reseeded=reseeded, workers=workers, **IN_EPOCH_END)
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("in_epoch_end", [False, True], ids=["on_train_batch_end", "on_train_epoch_end"])
def test_an_epoch_boundary_resume_of_several_train_loaders_without_workers_is_exact_and_silent(
    package: str, in_epoch_end: bool, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"loaders": 2, "noisy_data": True}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, in_epoch_end=in_epoch_end, **options)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("reseed", ["early_callback.on_train_start", "module.on_train_start"])
def test_a_reseed_at_an_epoch_boundary_with_several_train_loaders_without_workers_warns_once(
    package: str, reseed: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, loaders=2, **IN_EPOCH_END)
    assert len(messages) == 1


KINDS = ["iterable", "stateful"]  # loaders whose iterator build the tracker does not see from inside the loader


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("reseed", "where"),
    [
        pytest.param("early_callback.on_train_start", "in an on_train_start hook", id="early-callback-on_train_start"),
        pytest.param("module.on_train_start", _BOUNDARY, id="module-on_train_start"),
        pytest.param("early_callback.on_train_epoch_start", _BOUNDARY, id="early-callback-on_train_epoch_start"),
    ],
)
def test_a_reseed_in_a_start_hook_at_an_epoch_boundary_with_an_iterable_or_stateful_loader_warns_once(
    package: str, kind: str, workers: int, reseed: str, where: str, tmp_path: Path
) -> None:
    # Lightning's setup_data built the iterator (an iterable without a length: prefetched its first batch too);
    # compared with the RNGs as setup_data left them, then after the on_train_start hooks and at the tracker's
    # on_train_epoch_start
    messages, _ = _resume(package, tmp_path, EPOCH_END, reseed, workers=workers, kind=kind, **IN_EPOCH_END)
    assert len(messages) == 1
    assert where in messages[0]


SAVES = {
    "mid-epoch": (MID_EPOCH, {}),
    "on_train_batch_end": (EPOCH_END, {}),
    "on_train_epoch_end": (EPOCH_END, IN_EPOCH_END),
}


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(  # a plain iterable saved inside an epoch: see the test after the next one
    ("kind", "saved"),
    [(kind, saved) for kind in KINDS for saved in SAVES if (kind, saved) != ("iterable", "mid-epoch")],
)
def test_a_resume_with_an_iterable_or_stateful_loader_is_exact_and_silent(
    package: str, kind: str, workers: int, saved: str, tmp_path: Path
) -> None:
    # without workers the dataset draws from the global RNG (not for an iterable's batch prefetched before a
    # mid-epoch checkpoint: see below); saved in on_train_epoch_end, the resumed run draws a per-epoch value from
    # Python's RNG in the module's on_train_epoch_start, as the uninterrupted run does
    save_at, where = SAVES[saved]
    prefetched = kind == "iterable" and saved == "mid-epoch"
    options: dict[str, Any] = {"workers": workers, "kind": kind, "noisy_data": workers == 0 and not prefetched}
    if where:
        options["draw_each_epoch"] = "random"
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, save_at, **where, **options)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_mid_epoch_resume_of_a_plain_iterable_drawing_in_the_main_process_says_its_epoch_restarts_not_a_prefetch(
    package: str, tmp_path: Path
) -> None:
    # Lightning prefetches a batch of a loader without a length; a plain one's resumed epoch is read from its start
    # anyway (warned), so that prefetch's draws are not named apart
    options: dict[str, Any] = {"kind": "iterable", "noisy_data": True}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    path = tmp_path / "saved.ckpt"
    fit(package, path, save_at=MID_EPOCH, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = fit(package, path, **options)
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    assert [message for message in inexact if message.startswith("resuming DataLoader over NoisyStream")]
    assert [message for message in inexact if "prefetched" in message] == []
    assert rng_warnings(caught) == []
    assert not _equal(weights, straight)


EVERY_BATCH = {  # draws before on_train_batch_start of every batch, in both runs
    "transfer-hook": {"draw_at_transfer": True},
    "callback-before": {"draw_before": True},
}


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("draws", list(EVERY_BATCH))
@pytest.mark.parametrize(
    ("reseed", "save_at", "where", "at"),
    [
        pytest.param(
            "early_callback.on_train_epoch_start", EPOCH_END, _BOUNDARY, IN_EPOCH_END, id="callback-epoch-start"
        ),
        pytest.param("module.on_train_start", MID_EPOCH, "in an on_train_start hook", STATEFUL, id="module-mid-epoch"),
        pytest.param(
            "callback.on_train_start", MID_EPOCH, "in an on_train_start hook", STATEFUL, id="callback-mid-epoch"
        ),
    ],
)
def test_a_reseed_in_a_start_hook_with_workers_and_draws_before_each_batch_start_warns_once(
    package: str, draws: str, reseed: str, save_at: int, where: str, at: dict[str, Any], tmp_path: Path
) -> None:
    # compared after the start hooks (mid-epoch) or at the tracker's on_train_epoch_start (epoch boundary): before the
    # first fetch, the batch transfer hooks and on_train_batch_start
    messages, _ = _resume(package, tmp_path, save_at, reseed, workers=2, **at, **EVERY_BATCH[draws])
    assert len(messages) == 1
    assert where in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    ("save_at", "where"), [(MID_EPOCH, STATEFUL), (EPOCH_END, IN_EPOCH_END)], ids=["mid-epoch", "epoch-end"]
)
def test_a_callback_before_the_tracker_drawing_at_every_batch_start_raises_no_false_alarm_with_workers(
    package: str, workers: int, save_at: int, where: dict[str, Any], tmp_path: Path
) -> None:
    straight = fit(package, tmp_path / "none.ckpt", workers=workers, draw_before=True, **_kind(save_at))
    messages, weights = _resume(package, tmp_path, save_at, draw_before=True, workers=workers, **where)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("draw_before", [False, True], ids=["alone", "callback-before-draws-at-batch-start"])
@pytest.mark.parametrize(
    ("reseed", "save_at", "where", "at"),
    [
        pytest.param("module.on_train_start", EPOCH_END, _BOUNDARY, IN_EPOCH_END, id="epoch-boundary"),
        pytest.param("module.on_train_start", MID_EPOCH, "in an on_train_start hook", STATEFUL, id="mid-epoch"),
    ],
)
def test_a_reseed_in_a_start_hook_with_a_training_step_that_fetches_its_batch_warns_once(
    package: str, draw_before: bool, reseed: str, save_at: int, where: str, at: dict[str, Any], tmp_path: Path
) -> None:
    # training_step(dataloader_iter) fetches after on_train_batch_start; the start hooks are compared before either
    messages, _ = _resume(package, tmp_path, save_at, reseed, draw_before, fetch_in_step=True, **at)
    assert len(messages) == 1
    assert where in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_epoch_boundary_resume_with_a_training_step_that_fetches_its_batch_is_exact_and_silent(
    package: str, workers: int, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"workers": workers, "fetch_in_step": True, "noisy_data": True, "draw_before": True}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, **options, **IN_EPOCH_END)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reseed", ["module.on_train_start", "callback.on_train_start"])
def test_a_reseed_in_on_train_start_of_a_fit_resumed_inside_a_validation_warns_once(
    package: str, workers: int, reseed: str, tmp_path: Path
) -> None:
    # compared when the train epoch runs again, before Lightning finishes the validation the checkpoint cut
    messages, _ = _resume(package, tmp_path, MID_EPOCH, reseed, workers=workers, in_validation=True, **STATEFUL)
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_fit_resumed_inside_a_validation_without_a_reseed_raises_no_reseed_warning(
    package: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, MID_EPOCH, in_validation=True, **STATEFUL)
    assert messages == []


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("reseeded", ["random", "numpy"])
def test_a_reseed_of_pythons_or_numpys_rng_in_on_train_start_is_named_even_with_a_callback_before_drawing_at_epoch_start(
    package: str, workers: int, reseeded: str, tmp_path: Path
) -> None:
    # the generators the early iterator did not draw from are compared between the on_train_start hooks and the
    # on_train_epoch_start hooks (Lightning's setup_data call at the epoch's start), before that callback draws
    options: dict[str, Any] = {"workers": workers, "reseeded": reseeded, "draw_before_each_epoch": True}
    messages, _ = _resume(package, tmp_path, EPOCH_END, "module.on_train_start", **options, **IN_EPOCH_END)
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_callback_before_the_tracker_drawing_at_every_epoch_start_raises_no_false_alarm_at_an_epoch_boundary(
    package: str, workers: int, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"workers": workers, "draw_before_each_epoch": True, "draw_each_epoch": "numpy"}
    straight = fit(package, tmp_path / "none.ckpt", **options)
    messages, weights = _resume(package, tmp_path, EPOCH_END, **options, **IN_EPOCH_END)
    assert messages == []
    assert _equal(weights, straight)


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_mid_epoch_resume_of_a_plain_loader_says_its_epoch_restarts_and_nothing_about_a_prefetched_batch(
    package: str, tmp_path: Path
) -> None:
    # Lightning's new iterator of the restarted epoch draws its seeds: part of the inexactness the tracker warns of
    path = tmp_path / "saved.ckpt"
    with pytest.warns(InexactResumeWarning, match="saving DataLoader over Indexed"):
        fit(package, path, save_at=MID_EPOCH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(package, path)
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    assert [message for message in inexact if message.startswith("resuming DataLoader over Indexed")]
    assert [message for message in inexact if "prefetched" in message] == []
    assert rng_warnings(caught) == []


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_reseed_in_on_train_start_of_a_plain_loader_resumed_mid_epoch_warns_once_naming_the_cause(
    package: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, MID_EPOCH, "module.on_train_start")
    assert len(messages) == 1
    assert "in an on_train_start hook" in messages[0]


@pytest.mark.parametrize("package", SAMPLED_PACKAGES)
def test_a_mid_epoch_resume_of_a_stateful_iterable_drawing_in_the_main_process_warns_naming_the_prefetched_batch(
    package: str, tmp_path: Path
) -> None:
    # Lightning prefetches a batch of a loader without a length: the saved run drew for it before its checkpoint,
    # the resumed run draws for it again when setup_data builds the iterator
    options: dict[str, Any] = {"kind": "stateful-iterable", "noisy_data": True}
    path = tmp_path / "saved.ckpt"
    fit(package, path, save_at=MID_EPOCH, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit(package, path, **options)
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    prefetch = [message for message in inexact if "prefetched the first batch of the resumed epoch" in message]
    assert len(prefetch) == 1
    assert rng_warnings(caught) == []
