"""One rank of the 2-process Accelerate test (gloo on 127.0.0.1; RANK etc. set by the test).

Runs the program uninterrupted, then stopped after ``save_state`` mid-epoch, then resumed
by ``load_state``; writes this rank's findings and the summed progress to ``argv[2]``;
``argv[3]`` is ``seedable`` for ``use_seedable_sampler=True``, else ``plain``.
"""

from __future__ import annotations

import json
import sys

import torch
from accelerate_drive import Setup, StopAt, run

import tracker_core


def main(directory: str, out: str, seedable: str) -> None:
    setup = Setup(samples=20, accumulation=2, epochs=2, seedable=seedable == "seedable")
    reference = run(setup)
    stopped = run(setup, stop=StopAt(4), save_dir=directory)
    resumed = run(setup, load_dir=directory)
    view = tracker_core.get_progress(resumed.accelerator)
    totals = tracker_core.reduce_state(view, "sum")
    findings = {
        "rank": resumed.accelerator.process_index,
        "world": resumed.accelerator.num_processes,
        "ids": stopped.train_ids + resumed.train_ids,
        "ids_exact": stopped.train_ids + resumed.train_ids == reference.train_ids,
        "weights_exact": all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True)),
        "progress_exact": resumed.state == reference.state,
        "samples": resumed.progress.view.train.samples.lifetime,
        "summed_samples": totals["stages"]["train"]["samples"]["lifetime"],
        "divergence": [str(d) for d in tracker_core.check_divergence(view)],
    }
    with open(out, "w") as file:
        json.dump(findings, file)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
