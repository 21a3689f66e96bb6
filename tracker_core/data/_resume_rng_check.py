"""Naming user code that moves the global RNGs between a checkpoint load and the first resumed batch (a
``torch.manual_seed`` after loading, a draw in a start hook): docs/adapters.md."""

from __future__ import annotations

import warnings
from collections.abc import Collection

import torch

from tracker_core._errors import InexactResumeWarning
from tracker_core.data._rng import GlobalRng, expanded


class ResumeRngCheck:
    """Remembers the global RNGs a load restored, compares them where the adapter says (docs/adapters.md), warns
    once; ``load`` names the call to seed before (``"Checkpoint.load_objects"``)."""

    GENERATORS: tuple[str, ...] = ("torch", "python", "numpy", "devices")
    """The global generators a check compares, by their keys in a saved snapshot (``devices``: accelerators')."""

    def __init__(self, load: str) -> None:
        self._load = load
        self._loaded: GlobalRng | None = None

    @property
    def armed(self) -> bool:
        """True between :meth:`loaded` and the last check (or a warning, or :meth:`forget`)."""
        return self._loaded is not None

    @property
    def loaded_state(self) -> GlobalRng | None:
        """The RNG states :meth:`loaded` remembered; None when not :attr:`armed`."""
        return self._loaded

    def loaded(self, state: GlobalRng | None = None) -> None:
        """A checkpoint was just loaded: remember the live RNG states (or ``state``, e.g. as an iterator's build
        after the load left them)."""
        self._loaded = GlobalRng.capture() if state is None else state

    def forget(self) -> None:
        """Nothing more to compare (a new run, or the next draw is one the uninterrupted run made too)."""
        self._loaded = None

    def moved_since(self, earlier: GlobalRng) -> tuple[str, ...]:
        """The :attr:`GENERATORS` whose state differs between ``earlier`` and the one remembered; empty when spent."""
        if self._loaded is None:
            return ()
        loaded, plain = expanded(self._loaded), expanded(earlier)
        return tuple(name for name in self.GENERATORS if plain.get(name) != loaded.get(name))

    def drew_only(self, draws: int) -> bool:
        """True if, since :meth:`loaded`, only torch's generator moved, by 1 to ``draws`` draws of one int64 each (what
        building a ``StatefulDataLoader(shuffle=True)`` draws, its sampler's seed, or a DataLoader's iterator, its base
        seed); a reseed is not that."""
        loaded = self._loaded
        if loaded is None or not isinstance(loaded.torch_state, torch.Tensor):
            return False
        if self.moved_since(GlobalRng.capture()) != ("torch",):
            return False
        generator, now = torch.Generator(), torch.get_rng_state()
        generator.set_state(loaded.torch_state)
        for _ in range(draws):
            torch.empty((), dtype=torch.int64).random_(generator=generator)
            if torch.equal(generator.get_state(), now):
                return True
        return False

    def check(self, where: str, *, last: bool = False, generators: Collection[str] = GENERATORS) -> bool:
        """True, with one ``InexactResumeWarning`` naming ``where``, if ``generators`` moved since the load. After a
        warning, or with ``last``, it is spent."""
        if self._loaded is None:
            return False
        moved = bool(generators) and any(name in generators for name in self.moved_since(GlobalRng.capture()))
        if last or moved:
            self._loaded = None
        if not moved:
            return False
        warnings.warn(
            f"the global RNG state changed {where} (e.g. torch.manual_seed): the checkpoint restored it, "
            "and the resumed run's dropout, augmentation and other random draws now differ from the "
            f"uninterrupted run. Seed before {self._load}, not after",
            InexactResumeWarning,
            stacklevel=3,
        )
        return True
