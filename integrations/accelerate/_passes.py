"""The train passes of an AcceleratorProgress's epochs: its train loaders, their saved and restored pass counters."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from accelerate.data_loader import BatchSamplerShard, SeedableRandomSampler, SkipBatchSampler, SkipDataLoader
from torch.utils.data import RandomSampler, SubsetRandomSampler, WeightedRandomSampler

from tracker_core import InexactResumeWarning, Tracker
from tracker_core.adapter import accelerate_checkpoint as checkpoint

TORCH_SHUFFLERS = (RandomSampler, WeightedRandomSampler, SubsetRandomSampler)  # torch's samplers drawing an order


class TrainPasses:
    """The prepared train loaders (by train dataloader index) and their passes in the current epoch."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._loaders: dict[int, Callable[[], Any]] = {}  # train dataloader index -> the prepared loader, as _held
        self._pass_start: dict[int, int | None] = {}  # index -> loader.iteration when its pass of this epoch began
        self._restored_iterations: dict[int, int] = {}  # index -> loader.iteration to set before the next pass
        self._finished: set[int] = set()  # restored mid-epoch after the pass yielded its last batch
        self.left: set[int] = set()  # those whose pass the loop left before its end
        self._read_again: set[int] = set()  # those whose pass began again in the epoch
        self._resumed: dict[int, int] = {}  # index -> batches its pass in the epoch load_state resumes skips
        self._restored_step: int | None = None  # accelerator.step after an elastic load, set when the pass begins

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its loaders."""
        return {**self.__dict__, "_loaders": self._live()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _loaders={i: _held(loader) for i, loader in state["_loaders"].items()})

    def _live(self) -> dict[int, Any]:
        """The tracked loaders the user still holds, by train dataloader index."""
        held = {index: loader() for index, loader in self._loaders.items()}
        return {index: loader for index, loader in held.items() if loader is not None}

    def track(self, loader: object, index: int) -> None:
        """Position the prepared loader's inner torch DataLoader (a DataLoaderShard only poses as one)."""
        self._loaders[index] = _held(loader)
        restored = self._restored_iterations.pop(index, None)
        if restored is not None and hasattr(loader, "iteration"):
            loader.iteration = restored
        inner = torch_loader(loader)
        batch_sampler = getattr(inner, "batch_sampler", None)
        for sampler in (getattr(inner, "sampler", None), getattr(batch_sampler, "sampler", None)):
            if isinstance(sampler, SeedableRandomSampler) and sampler.generator is None:
                # the generator (reseeded) its first iter would create, so a fresh loader has its checkpoint's
                sampler.generator = torch.Generator()
                sampler.generator.manual_seed(sampler.initial_seed)
        restores = bool(getattr(loader, "use_stateful_dataloader", False))  # Accelerate saves the loader's state
        self._tracker.track_train_loader(inner, index, framework_restores_state=restores)

    def check_resumed(self, loader: object, index: int) -> bool:
        """In the resumed epoch, refuse a loader made by ``skip_first_batches``; warn if it draws its order again.
        True if it has no state restored (prepared after ``load_state``) and is the first of the epoch to begin: it
        is read from its first batch, and the caller restarts the epoch."""
        resumed = self._resumed.get(index)
        if resumed is None:
            return False
        samplers = (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None))
        skips = [s.skip_batches for s in samplers if isinstance(s, SkipBatchSampler)]
        skipping = getattr(loader, "skip_batches", 0)
        if isinstance(loader, SkipDataLoader) or skipping:
            skips.append(skipping)
        if skips:
            raise ValueError(
                f"train dataloader {index} was made by accelerator.skip_first_batches (it skips its first "
                f"{sum(skips)} batches) and given to progress.train() in the epoch accelerator.load_state resumed, "
                f"where the prepared loader already resumes after the {resumed} batches trained before the "
                "checkpoint: batches would be skipped twice and never trained, or the position lost. Remove the "
                "skip_first_batches call and pass the prepared loader: progress.train() yields exactly the batches "
                "not yet trained. Nothing was trained"
            )
        first = not self._pass_start  # no pass of the resumed epoch began yet
        del self._resumed[index]
        if index not in self._finished:
            _warn_if_order_drawn_again(loader, index, "resuming")
        restores = getattr(loader, "use_stateful_dataloader", False)
        if restores and index not in self._finished and getattr(torch_loader(loader), "next_iter_state", 0) is None:
            warnings.warn(  # a StatefulDataLoader's restored state waits in next_iter_state until its next iter()
                f"train dataloader {index} has no state restored: it was prepared after accelerator.load_state, "
                "which restores the loaders prepared before it only, so the resumed epoch reads it from its first "
                f"batch, its {resumed} batches trained before the checkpoint trained again. Prepare it before "
                "load_state",
                InexactResumeWarning,
                stacklevel=4,
            )
            return first
        return False

    def begin(self, loader: Iterable[Any], index: int, accelerator: Any) -> bool:
        """Track ``loader`` and begin its pass; False when nothing is left of it (restored after its end)."""
        self.track(loader, index)
        if self._restored_step is not None:  # after Accelerate's load_state restored the old geometry's
            accelerator.step, self._restored_step = self._restored_step, None
        if index in self._pass_start:
            self._read_again.add(index)
        pass_start = self._pass_start[index] = getattr(loader, "iteration", None)
        if index not in self._finished:
            return True
        self._finished.discard(index)  # Accelerate's loaders fail on an empty pass (an iterable one raises),
        if start_from_the_beginning(loader):  # so a StatefulDataLoader Accelerate restored at its pass's end
            self._tracker.train_iterators_built()  # nothing built: its pass begins anew, drawing as a new one does
        if pass_start is not None:
            loader.iteration = pass_start + 1  # type: ignore[attr-defined]
        return False

    def begin_epoch(self) -> None:
        """A train epoch begins: no pass of it has begun or been left."""
        self._pass_start.clear()
        self.left.clear()
        self._read_again.clear()

    def end_epoch(self) -> None:
        """The epoch ends: passes of the resumed epoch that never began start the next epoch from the beginning."""
        if self._resumed or self._finished:
            self._tracker.forget_loaded_positions()
        live = self._live()
        for index in self._resumed:
            start_from_the_beginning(live.get(index))
        self._resumed.clear()
        self._finished.clear()

    def saved_iterations(self, entry: Mapping[str, Any], in_epoch: bool) -> list[checkpoint.LoaderIteration | None]:
        """Each train loader's pass counter for ``save_state`` (None: none), beside the tracker ``entry`` (``in_epoch``:
        taken inside a train epoch the record has ended since); warns."""
        iterations: list[checkpoint.LoaderIteration | None] = []
        in_epoch = in_epoch or self._tracker.progress.view.train.epochs.lifetime.in_flight
        counts = self._tracker.progress.view.train.dataloaders
        live = self._live()
        for index in range(max(live, default=-1) + 1):
            loader = live.get(index)
            now = getattr(loader, "iteration", None)
            begun = index in self._pass_start  # else its flags are the last epoch's
            finished = begun and bool(getattr(loader, "end_of_dataloader", False))
            pass_start = self._pass_start.get(index)
            left = in_epoch and index in self.left
            iterations.append(None if now is None else checkpoint.LoaderIteration(now, pass_start, finished, left))
            if in_epoch and not finished and index < len(counts) and counts[index].batches.epoch:
                _warn_if_order_drawn_again(loader, index, "saving")
        over = {i for i, it in enumerate(iterations) if it and it.finished}
        if in_epoch and not self._restarting(entry, over):
            _warn_if_inexact(iterations, over, sorted(self.left), "save_state after")
        if in_epoch and self._read_again:
            warnings.warn(
                f"save_state after train dataloader(s) {', '.join(map(str, sorted(self._read_again)))} began another "
                "pass in this epoch: the checkpoint holds the position in the pass in flight, not how many passes the "
                "loop made, so a resumed loop that reads a loader twice an epoch reads the rest of this pass, then "
                "all of its next one",
                InexactResumeWarning,
                stacklevel=4,
            )
        return iterations

    def _restarting(self, entry: Mapping[str, Any], over: set[int]) -> list[int]:
        """The loaders of the tracker ``entry`` saved as plain ones inside their pass (only there the core keeps their
        epoch record, empty: docs/schema.md), not ``over``: Accelerate's loop reads them whole, the epoch restarts."""
        parts = entry.get("train_loaders")
        counts = self._tracker.progress.view.train.dataloaders
        if not isinstance(parts, list):
            return []
        return [
            index
            for index, part in enumerate(parts[: len(counts)])
            if isinstance(part, Mapping)
            and part.get("kind") == "plain"
            and part.get("epoch") is not None
            and counts[index].batches.epoch
            and index not in over
        ]

    def restore(
        self, iterations: list[checkpoint.LoaderIteration | None], resuming_epoch: bool, entry: Mapping[str, Any]
    ) -> list[int]:
        """After ``load_state`` of the tracker ``entry``: each loader's pass counter and, in the resumed epoch, the
        passes over or resumed. Returns the plain loaders saved inside their pass (the caller restarts the epoch)."""
        saved = {index: iteration for index, iteration in enumerate(iterations) if iteration is not None}
        self._restored_iterations = {i: it.now for i, it in saved.items()}
        self._restored_step, self._finished, self._resumed = None, set(), {}
        if not resuming_epoch:
            return []
        view = self._tracker.progress.view
        self._restored_iterations.update({i: it.pass_start for i, it in saved.items() if it.pass_start is not None})
        self._restored_step, finished = _mapped_passes(view.resume_mapping, self._live())
        over = {i for i, it in saved.items() if finished.get(i, it.finished)}
        plain = self._restarting(entry, over)
        if plain:  # the epoch restarts; accelerator.step goes on from the saved (or mapped) one
            return plain
        self._finished = over
        self._resumed = {i: d.batches.epoch for i, d in enumerate(view.train.dataloaders) if d.batches.epoch}
        left = [i for i, it in saved.items() if it.left]
        _warn_if_inexact(iterations, self._finished, left, "load_state of a checkpoint saved after")
        return []


def _held(loader: object) -> Callable[[], Any]:
    """A weak reference to ``loader`` (one the user drops ends its workers at once); a list or other iterable that
    takes none is held."""
    try:
        return weakref.ref(loader)
    except TypeError:
        return lambda: loader


def torch_loader(loader: object) -> Any:
    """The torch DataLoader a prepared ``loader`` iterates (its ``base_dataloader``; it poses as that one)."""
    return getattr(loader, "base_dataloader", loader)


def _mapped_passes(mapping: Mapping[str, Any] | None, loaders: Mapping[int, Any]) -> tuple[int | None, dict[int, bool]]:
    """After an elastic load: the ``accelerator.step`` to set (or None) and, by loader index, whether its pass ended."""
    if mapping is None or not mapping["train_loaders"]:
        return None, {}
    finished = {}
    step = 0  # a finished pass ended its dataloader, which reset Accelerate's counter
    for record in mapping["train_loaders"]:
        index, consumed = record["index"], record["batches_consumed"]
        finished[index] = consumed == len(torch_loader(loaders[index]))
        if not finished[index]:
            step = consumed
    return step, finished


def start_from_the_beginning(loader: object) -> bool:
    """Drop the position ``load_state`` gave a StatefulDataLoader (it starts from its first batch); True if any."""
    inner = torch_loader(loader)
    if getattr(inner, "next_iter_state", None) is None:
        return False
    inner.next_iter_state = None
    inner.load_state_dict({})  # a load, even of an empty state, drops the iterator the loader keeps
    return True


def _warn_if_inexact(
    iterations: list[checkpoint.LoaderIteration | None], finished: set[int], left: list[int], when: str
) -> None:
    """Warn, ``when`` saving or loading, if a pass was open at the save and another is open or still to begin, or
    if the loop had left the passes ``left`` of the saved epoch before their end (the warnings say why)."""
    open_passes = [i for i, it in enumerate(iterations) if it is not None and it.pass_start == it.now]
    to_begin = [i for i, it in enumerate(iterations) if it is not None and it.pass_start is None and i not in finished]
    if open_passes and len(open_passes) + len(to_begin) > 1:
        names = ", ".join(str(i) for i in sorted(open_passes + to_begin))
        warnings.warn(
            f"train dataloaders {names} have passes open or still to begin in the resumed epoch: Accelerate's "
            "step counter and its gradient sync at the end of a loader follow the most recently begun loader, "
            "and the resumed passes begin in the order the loop asks for them, which can differ from the saving "
            "run's, so optimizer steps can fall on other batches (each loader's samples continue exactly)",
            InexactResumeWarning,
            stacklevel=5,
        )
    if left:
        warnings.warn(
            f"{when} the loop left the pass of train dataloader(s) {', '.join(map(str, left))} before its end in "
            "its epoch: the resumed epoch is re-entered and that pass yields its remaining batches (save after the "
            "epoch, or before leaving the pass)",
            InexactResumeWarning,
            stacklevel=5,
        )


def index_sampler(loader: object) -> object:
    """The sampler of indices a prepared ``loader`` batches, under Accelerate's ``BatchSamplerShard`` too; or None."""
    batches = getattr(torch_loader(loader), "batch_sampler", None)
    return getattr(getattr(batches, "batch_sampler", batches), "sampler", None)


def _warn_if_order_drawn_again(loader: object, index: int, doing: str) -> None:
    """Warn if ``loader`` (a prepared StatefulDataLoader) shuffles by a sampler with a generator of its own (torchdata's
    RandomSampler; torch's samplers are the core's to warn of) under Accelerate's ``BatchSamplerShard`` (several
    processes)."""
    shard = getattr(torch_loader(loader), "batch_sampler", None)
    sampler = index_sampler(loader)
    if (
        not getattr(loader, "use_stateful_dataloader", False)
        or not isinstance(shard, BatchSamplerShard)
        or isinstance(sampler, TORCH_SHUFFLERS)
        or not isinstance(getattr(sampler, "generator", None), torch.Generator)
    ):
        return
    warnings.warn(
        f"{doing} train dataloader {index} mid-epoch: Accelerate's BatchSamplerShard has no state of its own, so the "
        "StatefulDataLoader's state leaves out its sampler's (torchdata's RandomSampler), and the resumed loader draws "
        "the epoch's order again from the sampler's generator as the checkpoint left it: the rest of the epoch trains "
        "other batches (huggingface/accelerate#4195). Use use_seedable_sampler=True over a DataLoader(shuffle=True)",
        InexactResumeWarning,
        stacklevel=5,
    )
