"""Count learning-rate scheduler steps, whatever framework steps the scheduler.

torch's schedulers have no step hooks, and a scheduler's instance attributes are its state:
``LRScheduler.state_dict()`` returns every entry of ``__dict__``, so a ``step`` wrapped on
the instance would be saved in (and break) every checkpoint. Instead the scheduler's class
is swapped for a subclass whose stepping method also counts, made once per class: the
scheduler's state, its methods' behaviour, its class name and its pickled form stay as
they were.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from torch.utils.hooks import RemovableHandle

from tracker_core.counting._stage import TrainStageProgress

_Targets = OrderedDict[int, TrainStageProgress]
_TARGETS: dict[int, _Targets] = {}  # id(scheduler) -> where its steps are counted
_COUNTING: dict[tuple[type, str], type] = {}  # (class, method) -> its counting subclass


def count_scheduler_steps(
    train: TrainStageProgress, schedulers: Sequence[object], method: str = "step"
) -> list[RemovableHandle]:
    """Count each completed call of ``scheduler.<method>()`` as a scheduler step of ``train``.

    ``method`` is the call that steps the scheduler: ``step`` for torch's LR schedulers; an
    Ignite ``ParamScheduler`` handler steps when the engine calls it (``__call__``). Calling
    this again for a scheduler counts it once, for the latest ``train``. Remove the returned
    handles to stop counting. Raises ``TypeError``, changing nothing, for an object without
    ``method`` or whose class cannot be extended (a built-in type).
    """
    handles = []
    for scheduler in schedulers:
        if not callable(getattr(scheduler, method, None)):
            raise TypeError(f"{type(scheduler).__name__} has no {method}() to count as a scheduler step")
        if getattr(type(scheduler), "_tracker_core_counts", None) != method:
            try:
                scheduler.__class__ = _counting_class(type(scheduler), method)
            except TypeError as error:
                raise TypeError(f"cannot count the steps of a {type(scheduler).__name__}: {error}") from None
        key = id(scheduler)
        if key not in _TARGETS:
            with contextlib.suppress(TypeError):  # not weakly referable: its few bytes stay
                weakref.finalize(scheduler, _TARGETS.pop, key, None)
        targets: _Targets = OrderedDict()
        handle = RemovableHandle(targets)
        targets[handle.id] = train
        _TARGETS[key] = targets  # replaces what an earlier call counted into
        handles.append(handle)
    return handles


def _counting_class(cls: type, method: str) -> type:
    """A subclass of ``cls`` whose ``method`` counts a step for the scheduler's target once it returned."""
    key = (cls, method)
    if key not in _COUNTING:
        stepping = getattr(cls, method)
        reducing: Any = cls.__reduce_ex__  # unbound: called with the instance

        def counted(self: object, *args: Any, **kwargs: Any) -> Any:
            result = stepping(self, *args, **kwargs)
            targets = _TARGETS.get(id(self))  # what this very scheduler was registered with
            if targets:
                for train in targets.values():
                    train.scheduler_step()
            return result

        def __reduce_ex__(self: object, protocol: Any) -> Any:  # pickled and copied as ``cls``
            reduced = reducing(self, protocol)
            if isinstance(reduced, tuple) and len(reduced) > 1 and reduced[1] and reduced[1][0] is type(self):
                # pickle insists that copyreg.__newobj__ makes the object's own class: call cls.__new__ instead
                make = cls.__new__ if getattr(reduced[0], "__name__", "") == "__newobj__" else reduced[0]
                return (make, (cls, *reduced[1][1:]), *reduced[2:])
            return reduced

        namespace = {
            method: counted,
            "__reduce_ex__": __reduce_ex__,
            "__slots__": (),
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "_tracker_core_counts": method,
        }
        _COUNTING[key] = type(cls)(cls.__name__, (cls,), namespace)
    return _COUNTING[key]
