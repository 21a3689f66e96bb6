"""``AcceleratorProgress.fit(max_epochs)``: the fit run as a context manager, whose exit says how the run ended."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

if TYPE_CHECKING:
    from tracker_core.integrations.accelerate._progress import AcceleratorProgress

Batch = TypeVar("Batch")


class Fit:
    """One fit run of ``max_epochs`` train epochs: ``with progress.fit(3) as fit: for epoch in fit.epochs(): ...``;
    leaving the block records how the run ended (docs/accelerate.md)."""

    __slots__ = ("_owner", "max_epochs")

    def __init__(self, owner: AcceleratorProgress, max_epochs: int) -> None:
        self._owner = owner
        self.max_epochs = max_epochs

    def __enter__(self) -> Fit:
        self._owner._begin_fit(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        ended = None if exc_type is None else "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "crashed"
        self._owner._leave_fit(self, ended)

    def epochs(self) -> Iterator[int]:
        """Yields the 0-based index of each train epoch until ``max_epochs`` are done, then completes the run; after
        ``load_state`` an epoch saved mid-way is yielded again, its :meth:`train` pass only the batches left."""
        owner = self._owner
        if owner._fit is not self:
            owner._note("fit.epochs() was iterated outside its with block: its epochs are not counted")
        epoch = owner.view.epoch_index
        while epoch < self.max_epochs:
            if owner._fit is self:
                owner._begin_train_epoch(epoch)
            yield epoch
            if owner._fit is self:
                owner._end_train_epoch()
                epoch = owner.view.epoch_index
            else:  # a load_state or another fit took over: count as the loop does
                epoch += 1
        if owner._fit is self:
            owner._end_fit()

    @overload
    def train(
        self, loader: Iterable[Batch], index: int = 0, *, with_index: Literal[False] = False
    ) -> Iterator[Batch]: ...

    @overload
    def train(
        self, loader: Iterable[Batch], index: int = 0, *, with_index: Literal[True]
    ) -> Iterator[tuple[int, Batch]]: ...

    def train(self, loader: Iterable[Batch], index: int = 0, *, with_index: bool = False) -> Iterator[Any]:
        """This epoch's pass over the prepared train ``loader``: :meth:`AcceleratorProgress.train`."""
        return self._owner.train(loader, index, with_index=with_index)  # type: ignore[call-overload,no-any-return]
