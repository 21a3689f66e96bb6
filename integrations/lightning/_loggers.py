"""After a resume, the Trainer's loggers continue at the checkpoint's step: what the interrupted run logged later goes
(docs/lightning.md, "Loggers after a resume")."""

from __future__ import annotations

import csv
import importlib
import os
import warnings
from typing import TYPE_CHECKING, Any

from tracker_core.adapter import rewind_summary_writer
from tracker_core.integrations.lightning._bases import package_of

if TYPE_CHECKING:
    import pytorch_lightning as pl

_METRICS_FILE = "metrics.csv"


class LoggerRewind:
    """The CSV rows a resumed fit keeps, read before Lightning's writer deletes them; the rewind itself."""

    def __init__(self) -> None:
        self._csv_rows: dict[str, list[dict[str, str]]] = {}  # metrics.csv path -> its rows

    def loggers_opening(self, trainer: pl.Trainer) -> None:
        """Lightning is about to open the loggers of a fit: read each ``CSVLogger``'s ``metrics.csv``."""
        self._csv_rows = {}
        try:
            if trainer.state.fn != "fit" or not trainer.is_global_zero:
                return
            loggers = importlib.import_module(f"{package_of(trainer)}.loggers")
            for logger in trainer.loggers:
                if isinstance(logger, loggers.CSVLogger):
                    path = os.path.join(logger.log_dir, _METRICS_FILE)
                    self._csv_rows[path] = _rows_before(path, None)[1]
        except Exception:  # the first law; rewind() says which logger it could not rewind
            self._csv_rows = {}

    def forget(self) -> None:
        """The fit has begun: the rows read for a rewind are not needed any more."""
        self._csv_rows = {}

    def rewind(self, trainer: pl.Trainer, checkpoint: dict[str, Any]) -> None:
        """Rewind ``trainer``'s loggers to the step ``checkpoint`` resumes at (rank 0; nothing raises)."""
        step = checkpoint.get("global_step")
        if not trainer.is_global_zero or not isinstance(step, int) or isinstance(step, bool):
            return
        loggers = importlib.import_module(f"{package_of(trainer)}.loggers")
        left: list[str] = []
        for logger in trainer.loggers:
            name = type(logger).__name__
            try:
                if isinstance(logger, loggers.TensorBoardLogger):
                    problem = rewind_summary_writer(logger.experiment, step)
                    if problem:
                        left.append(f"{name} ({problem})")
                elif isinstance(logger, loggers.CSVLogger):
                    self._rewind_csv(logger, step)
                else:
                    left.append(f"{name} (the adapter cannot rewind it)")
                    continue
            except Exception as error:  # the first law: a log never stops the training
                left.append(f"{name} ({type(error).__name__}: {error})")
                continue
            other = _checkpoint_version(logger, trainer.ckpt_path)
            if other is not None:
                number = other.removeprefix("version_")
                version = number if number.isdigit() else repr(other)
                left.append(
                    f"{name} (it writes this fit into {os.path.basename(logger.log_dir)}, the checkpoint comes "
                    f"from {other}: pass {name}(..., version={version}) to continue it)"
                )
        self._csv_rows = {}
        if left:
            warnings.warn(
                f"resumed at step {step}: the points these loggers got from the interrupted run at step {step} "
                f"and later stay, beside this run's: {'; '.join(left)}",
                UserWarning,
                stacklevel=3,
            )

    def _rewind_csv(self, logger: Any, step: int) -> None:
        path = os.path.join(logger.log_dir, _METRICS_FILE)
        if os.path.isfile(path):  # the writer was open before this fit: rewrite its file, with its header
            header, kept = _rows_before(path, step)
            with open(path, "w", newline="") as file:
                writer = csv.DictWriter(file, fieldnames=header)
                writer.writeheader()
                writer.writerows(kept)
            return
        for row in self._csv_rows.get(path, []):  # deleted by the writer when it opened
            if int(row["step"]) < step:
                values = {key: value for key, value in row.items() if key != "step" and value != ""}
                logger.log_metrics(values, int(row["step"]))
        logger.save()


def _rows_before(path: str, step: int | None) -> tuple[list[str], list[dict[str, str]]]:
    """The header of the CSV file at ``path`` and its rows logged before ``step`` (all: None; none: no file)."""
    if not os.path.isfile(path):
        return [], []
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        rows = list(reader)
        header = list(reader.fieldnames or [])
    if "step" not in header:
        raise ValueError(f"{path} has no step column")
    return header, [row for row in rows if step is None or int(row["step"]) < step]


def _checkpoint_version(logger: Any, ckpt_path: str | os.PathLike[str] | None) -> str | None:
    """The version folder of ``logger`` holding ``ckpt_path``, if that is not the folder it logs into."""
    if not ckpt_path or "://" in str(ckpt_path):
        return None
    checkpoint = os.path.abspath(ckpt_path)
    root, own = os.path.abspath(logger.root_dir), os.path.abspath(logger.log_dir)
    if os.path.commonpath([checkpoint, root]) != root or os.path.commonpath([checkpoint, own]) == own:
        return None
    return os.path.relpath(checkpoint, root).split(os.sep)[0]
