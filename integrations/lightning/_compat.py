"""Every private attribute of Lightning the adapter touches, its class attributes checked when imported (for each installed package),
and the rules of Lightning's restart the adapter follows (docs/design.md, "Where we reach into a framework")."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from tracker_core.adapter import batches_in
from tracker_core.integrations._extra import check_attributes, check_version
from tracker_core.integrations.lightning._bases import installed

if TYPE_CHECKING:
    import pytorch_lightning as pl
    from pytorch_lightning.loops.fit_loop import _FitLoop

    from tracker_core.integrations.lightning._combined_batches import TrainLayout


def on_train_batch_end(trainer: pl.Trainer) -> bool:
    """True inside ``on_train_batch_end`` hooks (Lightning marked the batch processed, not completed)."""
    current: Any = trainer.fit_loop.epoch_loop.batch_progress.current
    return bool(current.ready == current.started == current.processed == current.completed + 1)


def in_train_epoch_start(trainer: pl.Trainer) -> bool:
    """True inside ``on_train_epoch_start`` hooks (Lightning marked the epoch ready, not started)."""
    current: Any = trainer.fit_loop.epoch_progress.current
    return bool(current.ready == current.started + 1)


def acting_at_epoch_start(trainer: pl.Trainer) -> list[str]:
    """The names of Lightning's callbacks that act in ``on_train_epoch_start`` (which a mid-epoch resume does not
    run): a ``GradientAccumulationScheduler`` accumulating in this epoch, a ``BaseFinetuning``."""
    callbacks: list[Any] = getattr(trainer, "callbacks", [])  # set in Trainer.__init__, not declared
    accumulating = trainer.accumulate_grad_batches > 1
    return [
        type(callback).__name__
        for callback in callbacks
        if _is_a(callback, "BaseFinetuning") or (accumulating and _is_a(callback, "GradientAccumulationScheduler"))
    ]


def plateau_at_epoch_end(trainer: pl.Trainer) -> bool:
    """True if a ``ReduceLROnPlateau`` is stepped at each epoch's end (Lightning skips that at a resumed one's)."""
    return any(config.reduce_on_plateau and config.interval == "epoch" for config in trainer.lr_scheduler_configs)


def wrapped_for_ddp(loader: object) -> bool:
    """True if Lightning wrapped the loader's sampler in its ``DistributedSamplerWrapper`` (a sampler that is not
    torch's own, under ``use_distributed_sampler``)."""
    samplers = (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None))
    return any(_is_a(sampler, "DistributedSamplerWrapper") for sampler in samplers)


def _is_a(obj: object, name: str) -> bool:
    """True if one of ``obj``'s classes is named ``name`` (Lightning's, of whichever installed package made it)."""
    return any(cls.__name__ == name for cls in type(obj).__mro__)


def validation_due(trainer: pl.Trainer) -> bool:
    """True if a validation follows the batch now ending (Lightning skips it when resuming from here)."""
    fit_loop = trainer.fit_loop
    fetcher = fit_loop._data_fetcher
    if fetcher is not None and fit_loop.epoch_loop._should_check_val_fx(fetcher):
        return True
    # The epoch's last batch under limit_train_batches: the fetcher does not know it is the last one yet
    every = trainer.check_val_every_n_epoch
    last = fit_loop.epoch_loop.batch_progress.current.ready >= trainer.num_training_batches
    epoch_validates = every is not None and (trainer.current_epoch + 1) % every == 0
    return bool(last and epoch_validates and trainer.enable_validation and sum(trainer.num_val_batches) > 0)


def validation_built_at_restart(trainer: pl.Trainer, epoch: int) -> DataLoader[Any] | None:
    """Resumed at the last batch of epoch ``epoch``, saved in ``on_train_batch_end``, where ``epoch`` validated nothing
    and the next epoch validates: Lightning counts a validation as run at that epoch's first batch
    (``_TrainingEpochLoop.advance``, its batch index reset), building the iterator of the first validation loader (a
    sequential ``CombinedLoader`` builds that one only). That loader if it is a ``DataLoader`` without a generator of
    its own (its base seed is one draw from the global RNG), else None."""
    every, batch = trainer.check_val_every_n_epoch, trainer.val_check_batch
    if every is None or (epoch + 1) % every == 0 or (epoch + 2) % every or batch in (None, float("inf")):
        return None
    loaders = trainer.val_dataloaders
    loaders = list(loaders.values()) if isinstance(loaders, dict) else loaders
    first = loaders[0] if isinstance(loaders, list | tuple) and loaders else loaders
    validates = trainer.enable_validation and sum(trainer.num_val_batches) > 0
    return first if validates and isinstance(first, DataLoader) and first.generator is None else None


def fetches_in_step(trainer: pl.Trainer) -> bool:
    """True if the train step fetches its own batches (``training_step(dataloader_iter)``)."""
    return type(trainer.fit_loop._data_fetcher).__name__ == "_DataLoaderIterDataFetcher"


def fit_counters_carry_on(trainer: pl.Trainer) -> bool:
    """True if this fit continues counters of an earlier fit (same Trainer, or restored from a checkpoint)."""
    fit_loop = trainer.fit_loop
    return trainer.global_step > 0 or fit_loop.epoch_progress.total.ready > 0 or fit_loop.total_batch_idx >= 0


def no_batch_fetched(trainer: pl.Trainer) -> bool:
    """True before the fit loop fetched its first train batch."""
    return bool(trainer.fit_loop.total_batch_idx < 0)


def discards_setup_iterator(trainer: pl.Trainer) -> bool:
    """In ``on_train_epoch_start``: True if Lightning builds this epoch's train iterator anew, not reading the one
    ``setup_data`` built."""
    fit_loop = trainer.fit_loop
    return trainer.current_epoch > 0 and not fit_loop.is_resuming and not fit_loop.epoch_loop.restarting


def reached_max_steps(trainer: pl.Trainer, global_step: int | None = None) -> bool:
    """True once ``global_step`` (default: the trainer's) reached ``max_steps``: a fit resumed there trains nothing."""
    max_steps = trainer.max_steps
    step = trainer.global_step if global_step is None else global_step
    return max_steps is not None and max_steps >= 0 and step >= max_steps


_PHASES = ("ready", "started", "processed", "completed")


@dataclasses.dataclass(frozen=True)
class Restart:
    """What Lightning's restart does with a fit checkpoint, read from the loop counters saved in it."""

    global_step: int
    epoch_consumed: bool = False  # the restored train epoch had run its last batch: Lightning will not read it further
    closes_epoch: bool = False  # Lightning counts that epoch finished without its end hooks and starts the next one
    no_epoch_counted: bool = False  # its epoch counters show no epoch in flight (see _restart)
    cut_batch: int | None = None  # saved with this batch fetched, its step not ended (ready, not processed): its index
    epoch: int = 0  # the restored train epoch's index (Lightning's epoch_progress.current.processed)
    finishes_validation: bool = False  # cut inside a validation batch: Lightning finishes it, else counts it finished


def restart_of(checkpoint: dict[str, Any]) -> Restart:
    """The :class:`Restart` of a fit from ``checkpoint`` (without saved loops, Lightning restarts no epoch)."""
    global_step = int(checkpoint.get("global_step", 0))
    loops = checkpoint.get("loops")
    fit_loop = loops.get("fit_loop") if isinstance(loops, dict) else None
    if not isinstance(fit_loop, dict):
        return Restart(global_step)
    batches = fit_loop.get("epoch_loop.batch_progress", {})
    epochs = fit_loop.get("epoch_progress", {}).get("total", {})
    restart = _restart(global_step, bool(batches.get("is_last_batch", False)), batches.get("total", {}), epochs)
    epoch = int(fit_loop.get("epoch_progress", {}).get("current", {}).get("processed", 0))
    # a validation batch started, not processed: Lightning's _EvaluationLoop.update_restart_stage finishes it
    val = fit_loop.get("epoch_loop.val_loop.batch_progress", {}).get("total", {})
    started = val.get("started", 0)
    finishes = started == val.get("ready") and val.get("processed") == started - 1 == val.get("completed")
    current = batches.get("current", {})
    cut_batch = current["ready"] - 1 if current.get("ready", 0) > current.get("processed", 0) else None
    return dataclasses.replace(restart, epoch=epoch, finishes_validation=finishes, cut_batch=cut_batch)


def closes_restored_epoch(fit_loop: _FitLoop) -> bool:
    """True if Lightning will count the train epoch its loops restored as finished without running its end."""
    batches = fit_loop.epoch_loop.batch_progress
    epochs = fit_loop.epoch_progress.total.state_dict()
    return fit_loop.restarting and _restart(0, batches.is_last_batch, batches.total.state_dict(), epochs).closes_epoch


def _restart(global_step: int, is_last_batch: bool, batches: dict[str, int], epochs: dict[str, int]) -> Restart:
    ready, started, processed, completed = (batches.get(phase, 0) for phase in _PHASES)
    # Lightning restarts after the batch (_TrainingEpochLoop.update_restart_stage), not running it again: it ran,
    # and was not a batch cut in its step or one a loader yielded as None (processed, never started)
    consumed = is_last_batch and started == ready == processed and completed in (processed - 1, processed)
    in_batch_end = completed == processed - 1
    ready, started, processed, completed = (epochs.get(phase, 0) for phase in _PHASES)
    # no epoch in flight: after a finished fit, or a fit resumed at an epoch end (docs/lightning.md, Limits)
    uncounted = ready > 0 and ready == started == processed == completed
    # saved in on_train_batch_end of an epoch's last batch: _FitLoop.reset closes that epoch, starts the next
    epoch_open = started == ready and processed == started - 1 == completed
    closes = consumed and ((epoch_open and in_batch_end) or uncounted)
    return Restart(global_step, epoch_consumed=consumed, closes_epoch=closes, no_epoch_counted=uncounted)


def set_sampler_epoch(loaders: list[object], epoch: int) -> None:
    """``set_epoch(epoch)`` on each loader's sampler and batch sampler's sampler that has one, as Lightning's fit
    loop does when an epoch starts: called before it builds that epoch's iterator at a restart."""
    for loader in loaders:
        batch_sampler = getattr(loader, "batch_sampler", None)
        samplers = {id(s): s for s in (getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None))}
        for sampler in samplers.values():  # each once: the sampler may be the batch sampler's
            set_epoch = getattr(sampler, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)


def train_layout(fit_loop: _FitLoop) -> TrainLayout | None:
    """Several train loaders: the ``CombinedLoader``'s mode, each loader's key in a combined batch and batches per
    pass (None if unknown). None for one loader."""
    combined = fit_loop._combined_loader
    if combined is None or len(combined.flattened) < 2:
        return None
    iterables = combined.iterables
    keys: list[Any] = list(iterables) if isinstance(iterables, dict) else list(range(len(combined.flattened)))
    limits: list[Any] = list(combined.limits) if combined.limits else [None] * len(keys)
    passes: list[int | None] = []
    for loader, limit in zip(combined.flattened, limits, strict=True):
        size = batches_in(loader)
        unlimited = limit is None or limit == float("inf")
        passes.append(size if unlimited or size is None else min(size, int(limit)))
    return str(combined._mode), keys, passes


@dataclasses.dataclass(eq=False)
class _SetupDataHooks:
    """``fit_loop.setup_data`` (``__call__``) and ``fit_loop._load_combined_loader_states`` replaced on one loop
    instance; picklable (``torch.save(trainer)``)."""

    fit_loop: _FitLoop
    before_iter: Callable[[list[object]], bool]
    after: Callable[[], None]
    anomaly: Callable[[str], None]  # notes what Lightning's hooks cannot stop for (a passenger does not raise)
    pending: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # a loading fit's, until it starts
    starting: bool = True  # the fit has not reached on_fit_start (after strategy setup, before the loops' restore)
    loaded: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # the loader states of the last load
    again: bool = False  # load ``loaded`` into the loaders set up next (see load_loader_states_again)

    def __call__(self) -> None:
        type(self.fit_loop).setup_data(self.fit_loop)
        self.after()

    def load_combined_loader_states(self) -> None:
        fit_loop = self.fit_loop
        combined = fit_loop._combined_loader
        loaders = [] if combined is None else list(combined.flattened)
        pending, self.pending = self.pending, []
        next_epoch = bool(loaders) and self.before_iter(loaders)
        again, self.again = self.again, False
        if again and self.loaded:
            self.load_states(loaders, self.loaded)
        elif pending and self.starting and not fit_loop.restarting:
            # set up before Lightning restored its loops (estimated_stepping_batches read in configure_optimizers):
            # Lightning has no state to load yet, and later reads the iterator built now; load them as it would
            self.load_states(loaders, pending)
        type(fit_loop)._load_combined_loader_states(fit_loop)  # restores loaders with a state of their own
        if next_epoch:  # the restored states are at the end of the epoch before: this iteration begins afresh
            for loader in loaders:
                if getattr(loader, "next_iter_state", None) is not None:  # a StatefulDataLoader's, public
                    loader.next_iter_state = None

    def load_states(self, loaders: list[Any], states: list[dict[str, Any]]) -> None:
        """Load ``states`` into the loaders with a state of their own, in order (``CombinedLoader._load_state_dicts``);
        none if their counts differ: noted, as this runs inside Lightning's hooks."""
        stateful = [loader for loader in loaders if has_own_state(loader)]
        if len(stateful) != len(states):
            self.anomaly(
                f"the train loaders have {len(stateful)} loaders with a state of their own, the checkpoint "
                f"{len(states)} states: none loaded (define the train loaders of the run that saved it)"
            )
            return
        for loader, state in zip(stateful, states, strict=True):
            loader.load_state_dict(state)


def has_own_state(loader: object) -> bool:
    """True if Lightning saves and restores ``loader``'s own state (its ``_Stateful`` protocol)."""
    return callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None))


def _hooks(fit_loop: _FitLoop) -> _SetupDataHooks | None:
    # getattr, not fit_loop.__dict__: reading __dict__ turns the loop's attributes into a dict for good, and
    # Lightning reads them on every batch, each read then slower (~6k instructions a batch)
    hooks = getattr(fit_loop, "setup_data", None)
    return hooks if isinstance(hooks, _SetupDataHooks) else None


def loader_states_loaded(fit_loop: _FitLoop, checkpoint: dict[str, Any]) -> None:
    """A fit loads ``checkpoint``: its train loaders' own states (``checkpoint["loops"]``), loaded when Lightning
    sets up the train loaders, if that comes before it restored its loops (see ``_SetupDataHooks``)."""
    hooks = _hooks(fit_loop)
    if hooks is None:
        return
    loops = checkpoint.get("loops")
    saved = loops.get("fit_loop") if isinstance(loops, dict) else None
    states = saved.get("state_dict", {}).get("combined_loader") if isinstance(saved, dict) else None
    hooks.loaded = list(states) if isinstance(states, list) else []
    hooks.pending = hooks.loaded if hooks.starting else []


def load_loader_states_again(fit_loop: _FitLoop) -> None:
    """In ``before_iter``: load the checkpoint's loader states into the loaders set up now (a fit continued after a
    resumed fit that trained nothing: Lightning loaded them into that fit's loaders, and does not again)."""
    hooks = _hooks(fit_loop)
    if hooks is not None:
        hooks.again = True


def put_back_loaded_states(fit_loop: _FitLoop) -> None:
    """After a resumed fit that trained nothing: its train loaders at the states Lightning loaded into them (it
    built their iterators from them and dropped those at its teardown, so that a save would hold fresh states)."""
    hooks = _hooks(fit_loop)
    combined = fit_loop._combined_loader
    if hooks is not None and hooks.loaded and combined is not None:
        hooks.load_states(list(combined.flattened), hooks.loaded)


def fit_starts(fit_loop: _FitLoop) -> None:
    """``on_fit_start``: Lightning restores its loops next, and loads their loader states itself."""
    hooks = _hooks(fit_loop)
    if hooks is not None:
        hooks.pending, hooks.starting = [], False


def hook_setup_data(
    fit_loop: _FitLoop,
    before_iter: Callable[[list[object]], bool],
    after: Callable[[], None],
    anomaly: Callable[[str], None],
) -> None:
    """Call ``before_iter(train_loaders)`` before Lightning's ``iter()`` builds the epoch's iterator (True: the next
    epoch begins, the restored loader states are dropped), ``after()`` when ``setup_data`` returned."""
    current = _hooks(fit_loop)
    hooks = _SetupDataHooks(fit_loop, before_iter, after, anomaly)
    if current is not None:  # a later call on this Trainer: the loader states it loaded last stay
        hooks.loaded, hooks.again = current.loaded, current.again
    fit_loop.setup_data = hooks  # type: ignore[method-assign]
    fit_loop._load_combined_loader_states = hooks.load_combined_loader_states  # type: ignore[method-assign]


def train_iterator(fit_loop: _FitLoop) -> object:
    """The iterator Lightning built last of its combined train loader (a new one: the loaders built theirs anew)."""
    combined = fit_loop._combined_loader
    return None if combined is None else combined._iterator


# The private attributes instances get in __init__, by class: checked on real instances by tests/test_compat_instances.py.
INSTANCE_ATTRIBUTES = {"_FitLoop": ("_combined_loader", "_data_fetcher"), "CombinedLoader": ("_mode", "_iterator")}


_LOWEST_VERSION = (2, 6)  # pyproject.toml's floor: below it Lightning tests fail (make test-versions)


def _check(package: str) -> None:
    fit_loop = importlib.import_module(f"{package}.loops.fit_loop")._FitLoop
    epoch_loop = importlib.import_module(f"{package}.loops.training_epoch_loop")._TrainingEpochLoop
    combined = importlib.import_module(f"{package}.utilities.combined_loader").CombinedLoader
    version: Any = getattr(importlib.import_module(package), "__version__", "?")
    check_version(package, str(version), _LOWEST_VERSION)
    check_attributes(
        package,
        str(version),
        {
            "_FitLoop": (fit_loop, ("_load_combined_loader_states", "setup_data", "is_resuming")),
            "_TrainingEpochLoop": (epoch_loop, ("_should_check_val_fx",)),
            "CombinedLoader": (combined, ("limits",)),
        },
    )


for _package in installed():
    _check(_package)


def trainer_of_log(log: object) -> pl.Trainer | None:
    """The Trainer of the LightningModule whose ``log`` Lightning assigns to each callback in ``Trainer._run``."""
    trainer: pl.Trainer | None = getattr(getattr(log, "__self__", None), "_trainer", None)
    return trainer
