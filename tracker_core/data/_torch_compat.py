"""Every private attribute of torch's and torchdata's data loading that data position touches.

Checked when this module is imported (torch) and when the first ``StatefulDataLoader`` is
positioned (torchdata): a missing attribute raises ``ImportError`` naming the installed version.
``ATTRIBUTES`` and ``torchdata_attributes()`` list them all, for the test that they still exist.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data._utils.fetch import _IterableDatasetFetcher
from torch.utils.data.dataloader import _BaseDataLoaderIter, _SingleProcessDataLoaderIter

__all__ = [
    "ATTRIBUTES",
    "build_iterator",
    "check_attributes",
    "drop_pending_state",
    "fetched_iterable",
    "forget_live_iterator",
    "install_iterator_hook",
    "iterator_hook",
    "note_each_batch",
    "random_sampler_after",
    "redraw_base_seed",
    "sampler_indices",
    "set_sampler_indices",
    "skip_sampler",
    "start_sampler_now",
    "state_reader",
    "stateful_loader_type",
    "stateful_reads_again",
    "stateful_yielded",
    "torchdata_attributes",
    "within_its_epoch",
    "without_sampler_skip",
]

# Owner -> the private attributes (class attributes, or assigned in the owner's __init__) used here.
ATTRIBUTES: dict[type, tuple[str, ...]] = {
    DataLoader: ("_get_iterator", "_iterator"),
    _BaseDataLoaderIter: (
        "_sampler_iter",
        "_reset",
        "_index_sampler",
        "_num_yielded",
        "_IterableDataset_len_called",
        "_shared_seed",
    ),
    _SingleProcessDataLoaderIter: ("_dataset_fetcher",),
    _IterableDatasetFetcher: ("dataset_iter", "ended"),
}

_END = object()
# Attributes this module sets on an iterator whose batches are noted (see note_each_batch).
_ON_BATCH = "_tracker_core_on_batch"
_ON_RESET = "_tracker_core_on_reset"


def check_attributes(package: str, version: str, owners: Mapping[Any, tuple[str, ...]]) -> None:
    """Raise ``ImportError`` naming ``package version`` if an attribute of ``owners`` (classes or
    modules) is gone."""
    missing = [
        f"{owner.__name__}.{name}"
        for owner, names in owners.items()
        for name in names
        if not hasattr(owner, name) and name not in _assigned_in_init(owner)
    ]
    if missing:
        raise ImportError(
            f"tracker-core's data position relies on {', '.join(missing)}, which {package} {version} "
            "does not have: install a version in the range tracker-core declares"
        )


def _assigned_in_init(owner: Any) -> tuple[str, ...]:
    code = getattr(getattr(owner, "__init__", None), "__code__", None)
    return tuple(code.co_names) if code is not None else ()


# --- the loader's iterator -------------------------------------------------------------------


def iterator_hook(loader: DataLoader[Any]) -> Any:
    """The ``_get_iterator`` set on this loader instance (not its class), or None."""
    return loader.__dict__.get("_get_iterator")


def install_iterator_hook(loader: DataLoader[Any], hook: Callable[[], Any]) -> None:
    """Make ``iter(loader)`` build its iterators through ``hook`` (an instance-level ``_get_iterator``)."""
    loader._get_iterator = hook  # type: ignore[method-assign]


def build_iterator(loader: DataLoader[Any]) -> Any:
    """An iterator built as the loader's class builds one."""
    return type(loader)._get_iterator(loader)


def forget_live_iterator(loader: DataLoader[Any]) -> None:
    """Drop a kept iterator (persistent workers) so the next epoch is built, and seen, anew."""
    stateful = stateful_loader_type()
    if stateful is not None and isinstance(loader, stateful):
        # Without an iterator (a new loader) load_state_dict({}) changes nothing: skip its two __setattr__.
        if loader._iterator is not None or loader._initial_iter_for_state_dict:  # type: ignore[attr-defined]
            loader.load_state_dict({})  # type: ignore[attr-defined]  # drops its iterator; keeps its pending state
    else:
        loader._iterator = None


def drop_pending_state(loader: DataLoader[Any]) -> None:
    """Forget the state a ``StatefulDataLoader`` would resume its next iterator from, and its iterator."""
    loader.next_iter_state = None
    forget_live_iterator(loader)


def sampler_indices(iterator: Any) -> Any:
    """The index iterator a DataLoader iterator draws from (``_sampler_iter``), or None."""
    return getattr(iterator, "_sampler_iter", None)


def set_sampler_indices(iterator: Any, indices: Any) -> None:
    iterator._sampler_iter = indices


def start_sampler_now(iterator: Any) -> None:
    """Make a single-process iterator's index sampler draw its order now, not at the first batch.

    A sampler without a state of its own (torch's ``RandomSampler`` without a generator seeds
    itself from the global RNG at its first ``next``) is kept as is when it has one: torchdata
    saves it from there.
    """
    indices = getattr(iterator, "_sampler_iter", None)
    if indices is None or (callable(getattr(indices, "state_dict", None)) and hasattr(indices, "load_state_dict")):
        return
    first = next(indices, _END)
    iterator._sampler_iter = iter(()) if first is _END else itertools.chain((first,), indices)


def random_sampler_after(sampler: Any, count: int) -> Iterator[int] | None:
    """The indices torch's ``RandomSampler`` ``sampler`` yields after its first ``count``, drawn as its ``__iter__``
    draws them (lazily: the seed and the permutation at the first ``next``, the next permutation, of which it
    yields nothing, when this one runs out), sliced as a tensor: no skipped index goes through Python. None
    unless ``sampler`` is exactly a ``RandomSampler`` of one permutation (no replacement, ``num_samples`` the
    dataset's size) and ``count`` is within it; ``tests/test_stateful_sampler_skip.py`` compares with torch's."""
    if type(sampler) is not RandomSampler or sampler.replacement:
        return None
    size = len(sampler.data_source)
    if sampler.num_samples != size or not 0 <= count < size:
        return None
    return _permutation_after(sampler.generator, size, count)


def _permutation_after(own: torch.Generator | None, size: int, count: int) -> Iterator[int]:
    if own is None:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())
        generator = torch.Generator()
        generator.manual_seed(seed)
    else:
        generator = own
    yield from torch.randperm(size, generator=generator)[count:].tolist()
    torch.randperm(size, generator=generator)  # torch's draws it for num_samples % size (here none of it)


def fetched_iterable(iterator: Any) -> Any:
    """The iterator of an IterableDataset a single-process DataLoader iterator reads, or None."""
    fetcher = getattr(iterator, "_dataset_fetcher", None)
    return getattr(fetcher, "dataset_iter", None)


def note_each_batch(
    iterator: Any, on_batch: Callable[[Any], None], on_reset: Callable[[Any], None] | None = None
) -> None:
    """Call ``on_batch(iterator)`` after each batch it yields, ``on_reset(iterator)`` when it begins
    another epoch (persistent workers). The iterator's class becomes a subclass of its own that
    does this; the callbacks are held by the iterator."""
    base: Any = type(iterator)
    iterator.__class__ = _noting_type(base)
    setattr(iterator, _ON_BATCH, on_batch)
    setattr(iterator, _ON_RESET, on_reset)


@functools.cache
def _noting_type(base: Any) -> type:
    def __next__(self: Any) -> Any:
        batch = base.__next__(self)
        getattr(self, _ON_BATCH)(self)
        return batch

    def _reset(self: Any, *args: Any, **kwargs: Any) -> None:
        base._reset(self, *args, **kwargs)
        on_reset = getattr(self, _ON_RESET, None)
        if on_reset is not None:
            on_reset(self)

    return type(base.__name__, (base,), {"__next__": __next__, "_reset": _reset, "__module__": __name__})


# --- torchdata ---------------------------------------------------------------------------------


@functools.cache
def stateful_loader_type() -> type | None:
    """torchdata's ``StatefulDataLoader`` (its private attributes checked), or None without torchdata."""
    try:
        import torchdata
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # pragma: no cover - torchdata is optional
        return None
    check_attributes("torchdata", getattr(torchdata, "__version__", "(unknown version)"), torchdata_attributes())
    return StatefulDataLoader


def torchdata_attributes() -> dict[Any, tuple[str, ...]]:
    """The torchdata attributes used here (torchdata must be importable)."""
    from torchdata.stateful_dataloader import StatefulDataLoader
    from torchdata.stateful_dataloader import incremental_state as keys
    from torchdata.stateful_dataloader import sampler as samplers
    from torchdata.stateful_dataloader import stateful_dataloader as module

    return {
        module: (
            "_ITERATOR_FINISHED",
            "_INDEX_SAMPLER_STATE",
            "_SAMPLER_ITER_STATE",
            "_SAMPLER_ITER_YIELDED",
            "_ITERABLEDATASET_LEN_CALLED",
            "_SHARED_SEED",
        ),
        keys: ("_FETCHER_STATE", "_DATASET_STATE", "_DATASET_ITER_STATE", "_FETCHER_ENDED"),
        samplers._BatchSamplerIterator: ("_SAMPLES_YIELDED", "_SAMPLER_STATE", "_SAMPLER_ITER_STATE", "sampler_iter"),
        samplers._StatefulRandomSamplerIterator: ("_YIELDED", "perm", "perm_index", "yielded", "sampler"),
        module._StatefulBaseDataLoaderIter: ("_reset", "_sampler_iter_yielded", "_finished"),
        StatefulDataLoader: ("next_iter_state", "_get_iterator", "_iterator", "_initial_iter_for_state_dict"),
        module._StatefulSingleProcessDataLoaderIter: ("_NUM_YIELDED", "_dataset_fetcher"),
        module._StatefulMultiProcessingDataLoaderIter: (
            "_SNAPSHOT",
            "_SNAPSHOT_STEP",
            "_WORKER_SNAPSHOTS",
            "_STEPS_SINCE_SNAPSHOT",
        ),
    }


@functools.cache
def _torchdata() -> tuple[Any, Any, Any]:
    """torchdata's ``incremental_state``, ``sampler`` and ``stateful_dataloader`` modules, imported once (an
    import statement in a function costs about a microsecond at each call; a resume made nine)."""
    from torchdata.stateful_dataloader import incremental_state, sampler, stateful_dataloader

    return incremental_state, sampler, stateful_dataloader


def stateful_reads_again(state: Mapping[str, Any], iterable: bool) -> tuple[int, int]:
    """Batches a ``StatefulDataLoader`` reads and drops when it resumes from its ``state_dict()`` ``state``:
    ``(to reach the position, since the last worker snapshot)``.

    It reads an iterable whose dataset and iterator have no state of their own up to the
    position, and a multi-process loader reads the steps taken since its workers' last
    snapshot (``snapshot_every_n_steps`` > 1).
    """
    keys, _, module = _torchdata()
    multi = module._StatefulMultiProcessingDataLoaderIter
    if multi._SNAPSHOT in state:
        snapshot = state[multi._SNAPSHOT]
        workers = [worker for worker in snapshot.get(multi._WORKER_SNAPSHOTS, {}).values() if worker is not None]
        to_position = 0
        if iterable and not any(_has_own_state(worker, keys) for worker in workers):
            to_position = int(snapshot.get(multi._SNAPSHOT_STEP, 0))
        return to_position, int(state.get(multi._STEPS_SINCE_SNAPSHOT, 0))
    if iterable and not _has_own_state(state, keys):
        return int(state.get(module._StatefulSingleProcessDataLoaderIter._NUM_YIELDED, 0)), 0
    return 0, 0


def state_reader(iterator: Any) -> Callable[[Any], Any]:
    """A function of the iterator returning what its ``state_dict()`` returns (a ``StatefulDataLoader``
    iterator), cheaply; it holds parts of the iterator, not the iterator.

    A single-process iterator's ``state_dict()`` decides by runtime-protocol checks, on every
    call, which of its parts have a state of their own (about 60 us each on Python 3.11); they
    are the same objects for the iterator's whole epoch, so this decides once and then builds
    the same dict as torchdata (``tests/test_data_torch_compat.py`` compares the two). A
    multi-process iterator's ``state_dict()`` is already cheap and is used as it is.
    """
    keys, samplers, module = _torchdata()
    single = module._StatefulSingleProcessDataLoaderIter
    if not isinstance(iterator, single):
        return _own_state_dict
    fetcher = iterator._dataset_fetcher
    iterable = isinstance(fetcher, _IterableDatasetFetcher)
    index_sampler = _serializer(iterator._index_sampler)
    sampler_iter = iterator._sampler_iter
    sampler_iter_state = _serializer(sampler_iter)
    if type(sampler_iter) is samplers._BatchSamplerIterator:
        sampler_iter_state = _batch_sampler_iterator_state(sampler_iter)
    source = fetcher.dataset_iter if iterable else None
    source_state = _serializer(source)
    dataset_state = _serializer(fetcher.dataset) if not iterable or source is not fetcher.dataset else _none

    def state(live: Any) -> dict[str, Any]:
        fetcher_state = None
        if iterable:
            fetcher_state = {keys._DATASET_ITER_STATE: source_state(), keys._FETCHER_ENDED: fetcher.ended}
        return {
            module._INDEX_SAMPLER_STATE: index_sampler(),
            module._SAMPLER_ITER_STATE: sampler_iter_state(),
            module._SAMPLER_ITER_YIELDED: live._sampler_iter_yielded,
            single._NUM_YIELDED: live._num_yielded,
            module._ITERABLEDATASET_LEN_CALLED: live._IterableDataset_len_called,
            module._SHARED_SEED: live._shared_seed,
            keys._FETCHER_STATE: fetcher_state,
            keys._DATASET_STATE: dataset_state(),
            module._ITERATOR_FINISHED: live._finished,
        }

    return state


def _none() -> None:
    return None


def _own_state_dict(iterator: Any) -> Any:
    return iterator.state_dict()


def _stateful(obj: Any) -> bool:
    """``isinstance(obj, torchdata's Stateful)`` as Python 3.11 decides it for an object that does not
    inherit it (both methods present and not None), without the runtime-protocol machinery: that
    costs about 60 us a check, and a resume makes five before its first batch."""
    return getattr(obj, "state_dict", None) is not None and getattr(obj, "load_state_dict", None) is not None


def _serializer(obj: Any) -> Callable[[], Any]:
    """torchdata's ``try_to_serialize(obj)`` as a function, its protocol check made now."""
    return obj.state_dict if _stateful(obj) else _none


def _batch_sampler_iterator_state(batches: Any) -> Callable[[], dict[str, Any]]:
    """torchdata's ``_BatchSamplerIterator.state_dict`` with its two protocol checks made now."""
    cls = type(batches)
    sampler = batches.sampler if _stateful(batches.sampler) else None
    indices = batches.sampler_iter if _stateful(batches.sampler_iter) else None

    def state() -> dict[str, Any]:
        out: dict[str, Any] = {cls._SAMPLES_YIELDED: batches.samples_yielded}
        if sampler is not None:
            out[cls._SAMPLER_STATE] = sampler.state_dict()
        if indices is not None:
            out[cls._SAMPLER_ITER_STATE] = indices.state_dict()
        return out

    return state


def within_its_epoch(state: Mapping[str, Any]) -> Mapping[str, Any]:
    """``state`` without torchdata's end-of-epoch mark: a loader resumed at its epoch's end yields
    nothing more of that epoch, instead of beginning the next one in the same ``iter()``."""
    module = _torchdata()[2]
    if not state.get(module._ITERATOR_FINISHED):
        return state
    return {**state, module._ITERATOR_FINISHED: False}


def without_sampler_skip(loader: Any, state: Mapping[str, Any]) -> tuple[Mapping[str, Any], int]:
    """``state`` (a 0-worker ``StatefulDataLoader``'s, shuffling with torchdata's own samplers) with its
    sampler at the start of its order, and the indices the sampler had drawn (0: ``state`` as it is).

    torchdata puts its ``RandomSampler`` back by drawing the consumed indices one by one in Python
    (57,600 calls at 90% of a 64,000-sample epoch); :func:`skip_sampler` then moves the loaded sampler
    to the same place in one step. Only a sampler without replacement, whose order is one permutation
    of the epoch, drawn when the sampler is loaded.
    """
    _, samplers, module = _torchdata()
    sampler: Any = loader.sampler
    if (
        loader.num_workers
        or type(sampler) is not samplers.RandomSampler
        or sampler.replacement
        or type(loader.batch_sampler) is not samplers.BatchSampler
    ):
        return state, 0
    inner, drawn_key = (
        samplers._BatchSamplerIterator._SAMPLER_ITER_STATE,
        samplers._StatefulRandomSamplerIterator._YIELDED,
    )
    batches = state.get(module._SAMPLER_ITER_STATE)
    indices = batches.get(inner) if isinstance(batches, Mapping) else None
    if not isinstance(batches, Mapping) or not isinstance(indices, Mapping):
        return state, 0
    drawn = indices.get(drawn_key)
    if not isinstance(drawn, int) or isinstance(drawn, bool) or drawn <= 0:
        return state, 0
    return {**state, module._SAMPLER_ITER_STATE: {**batches, inner: {**indices, drawn_key: 0}}}, drawn


def skip_sampler(iterator: Any, drawn: int) -> None:
    """Move the sampler of an iterator loaded from :func:`without_sampler_skip`'s state past its first ``drawn``
    indices, as drawing them would (its permutation is drawn; only the next one is drawn at its end)."""
    indices = iterator._sampler_iter.sampler_iter
    if drawn > len(indices.perm):  # more than one permutation (num_samples above the dataset's size)
        for _ in range(drawn):
            next(indices)
        return
    indices.perm_index = drawn
    indices.yielded = drawn


def redraw_base_seed(iterator: Any, generator: torch.Generator | None) -> None:
    """Make again, on the loader's ``generator``, the base-seed draw a loaded single-process iterator undid.

    Building an iterator draws the sampler's permutation, then the base seed, from the loader's
    generator; when torchdata's ``RandomSampler`` shares it (``shuffle=True, generator=g``), a
    0-worker iterator loads its state after both draws: the sampler sets the generator back to
    before its permutation and draws it again, so the base-seed draw is lost and every later epoch
    differs (torchdata 0.11 alone too; a multi-process iterator is exact). Call right after the
    build, before the sampler moves past its first permutation.
    """
    _, samplers, module = _torchdata()
    if generator is None or not isinstance(iterator, module._StatefulSingleProcessDataLoaderIter):
        return
    batches = getattr(iterator, "_sampler_iter", None)
    indices: Any = getattr(batches, "sampler_iter", batches)
    if type(indices) is not samplers._StatefulRandomSamplerIterator or indices.sampler.generator is not generator:
        return
    torch.empty((), dtype=torch.int64).random_(generator=generator)


def stateful_yielded(state: Mapping[str, Any]) -> int:
    """Batches of its epoch a ``StatefulDataLoader`` had yielded when it gave ``state``."""
    module = _torchdata()[2]
    multi = module._StatefulMultiProcessingDataLoaderIter
    if multi._SNAPSHOT in state:
        return int(state[multi._SNAPSHOT][multi._SNAPSHOT_STEP]) + int(state[multi._STEPS_SINCE_SNAPSHOT])
    return int(state[module._StatefulSingleProcessDataLoaderIter._NUM_YIELDED])


def _has_own_state(state: Mapping[str, Any], keys: Any) -> bool:
    fetcher = state.get(keys._FETCHER_STATE) or {}
    return state.get(keys._DATASET_STATE) is not None or fetcher.get(keys._DATASET_ITER_STATE) is not None


check_attributes("torch", torch.__version__, ATTRIBUTES)
