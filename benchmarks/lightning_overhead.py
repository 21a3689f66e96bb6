"""Per-batch cost of the Lightning ProgressTracker on a tiny model, against an empty Callback().

Linear(32, 2), batch 4, SGD, one thread, a plain DataLoader, a real CPU Trainer. Lightning
charges every registered callback ~6 hook calls per batch, so the fair baseline is an empty
``Callback()``; no callback at all is shown for reference (timings only). Per-batch time is
the difference of two fits (``LARGE`` and ``SMALL`` batches) over the extra batches, so
Trainer setup cancels; modes are interleaved and medians printed (timings swing +-30% here).
Callgrind then counts the instructions of the same fits, interleaved in one process, each
mode's least figure over the repeats (see _callgrind.py: the allocators add a few thousand
instructions a batch to some fits). Target (issue 26): at most 1% on top of the empty callback.
Prints figures only.
Run: .venv/bin/python benchmarks/lightning_overhead.py [--callgrind]  (--callgrind: counts only)
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable

import pytorch_lightning as pl
import torch
from _callgrind import counts_per_batch, main, run_segments
from torch.utils.data import DataLoader, TensorDataset

from tracker_core.integrations.lightning import ProgressTracker

MODES = ("none", "empty", "tracker")
SMALL, LARGE = 100, 1_100
# shorter fits, more of them: the noise is per batch (the allocators' state), so more repeats steady the least
CALLGRIND_MODES = ("empty", "tracker")
CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS = 20, 120, 9
TARGET = 1.0  # percent on top of the empty callback (issue 26)


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _callbacks(mode: str) -> list[pl.Callback]:
    return {"none": [], "empty": [pl.Callback()], "tracker": [ProgressTracker()]}[mode]


def _trainer_and_loader(mode: str, batches: int) -> tuple[pl.Trainer, DataLoader[tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4 * batches, 32), torch.randint(0, 2, (4 * batches,)))
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False, logger=False,
        enable_model_summary=False, enable_checkpointing=False, callbacks=_callbacks(mode),
    )  # fmt: skip
    return trainer, DataLoader(data, batch_size=4)


def fit_seconds(mode: str, batches: int) -> float:
    trainer, loader = _trainer_and_loader(mode, batches)
    start = time.perf_counter()
    trainer.fit(Tiny(), loader)
    return time.perf_counter() - start


def hooks_seconds_per_batch(batches: int = 100_000) -> float:
    """The tracker's own per-batch hooks called directly (no Lightning dispatch), within one epoch."""
    tracker = ProgressTracker()
    tracker._train.epoch_begin()
    batch = (torch.zeros(4, 32), torch.zeros(4, dtype=torch.long))
    start_batch, zero_grad = tracker.on_train_batch_start, tracker.on_before_zero_grad
    backward, end_batch = tracker.on_before_backward, tracker.on_train_batch_end
    start = time.perf_counter()
    for index in range(batches):
        start_batch(None, None, batch, index)  # type: ignore[arg-type]
        zero_grad(None, None, None)  # type: ignore[arg-type]
        backward(None, None, None)  # type: ignore[arg-type]
        end_batch(None, None, None, batch, index)  # type: ignore[arg-type]
    return (time.perf_counter() - start) / batches


def callgrind_segments() -> None:
    """What callgrind counts (see _callgrind.run_segments): one fit per segment."""
    torch.set_num_threads(1)

    def prepare(mode: str, batches: int) -> Callable[[], object]:
        trainer, loader = _trainer_and_loader(mode, batches)
        module = Tiny()
        return lambda: trainer.fit(module, loader)

    run_segments(CALLGRIND_MODES, prepare, CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS)


def timing() -> None:
    torch.set_num_threads(1)
    rounds = 7
    micros: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios: list[float] = []
    fit_seconds("empty", SMALL)  # warm up
    for _ in range(rounds):
        for mode in MODES:
            micros[mode].append((fit_seconds(mode, LARGE) - fit_seconds(mode, SMALL)) / (LARGE - SMALL) * 1e6)
        ratios.append(micros["tracker"][-1] / micros["empty"][-1])
    for mode, label in (("none", "no callback"), ("empty", "empty Callback()"), ("tracker", "ProgressTracker")):
        print(f"{label + ':':20} {statistics.median(micros[mode]):7.1f} us/batch")
    print(f"ProgressTracker vs empty Callback(): {(statistics.median(ratios) - 1) * 100:+.2f}%  (target <= +{TARGET}%)")
    hooks = statistics.median(hooks_seconds_per_batch() for _ in range(5)) * 1e6
    share = hooks / statistics.median(micros["empty"]) * 100
    print(f"the tracker's per-batch hooks alone: {hooks:.2f} us/batch = {share:.2f}% of a batch with an empty callback")


def callgrind() -> None:
    measured = counts_per_batch(__file__, CALLGRIND_SMALL, CALLGRIND_LARGE)
    if measured is None:
        return
    counts, spread = measured
    base = counts["empty"]
    print(
        f"callgrind, empty Callback(): {base:10.0f} instructions/batch  (least of {CALLGRIND_REPEATS} repeats; "
        f"largest spread between repeats of a mode: {spread:.0f})"
    )
    print(
        f"callgrind, ProgressTracker:  {counts['tracker']:10.0f} instructions/batch  "
        f"+{counts['tracker'] - base:.0f} ({(counts['tracker'] / base - 1) * 100:+.2f}%)  (target <= +{TARGET}%)"
    )


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    main(timing, callgrind_segments, callgrind)
