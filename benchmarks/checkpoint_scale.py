"""Checkpoint cost per rank at 1, 2, 4, 8 and 16 gloo processes, and its projection to 1,024 and 16,384 ranks.

Each rank trains 3 batches of a tiny map-style loader (torchdata's StatefulDataLoader over a
DistributedSampler giving each rank 64 numbers, one tracked train loader, so the mid-epoch entry
holds the loader's position), then, ROUNDS times: saves (``Tracker.gathered_state_dict``: one
gather to rank 0, the writer, which writes each rank's entry to its own file beside the checkpoint,
``write_rank_files``, then ``torch.save``s the checkpoint: rank 0's entry and the index,
as the Lightning adapter's checkpoint IO does with ``rank_files=True``) and loads (every rank
``torch.load``s the checkpoint whole, as the framework does, and ``load_state_dict``s it through
``with_rank_files``, which reads this rank's file only).

Per rank: payload bytes sent and received by the gather (``tracker_core/distributed/_to_writer.py``:
an 8-byte all_reduce of the longest entry, then each entry's pickle behind its 8-byte length,
padded to the longest, within bytes of its own here), bytes written, bytes read at load (the
checkpoint file the framework reads whole plus the rank file the tracker reads), and CPU seconds
of this process (the median over rounds; wall time on 2 cores shared by 16 processes measures the
queue, not the work). The writer (rank 0) is shown apart: it receives and writes every rank's entry.

Target: the per-rank figures (the median over ranks other than the writer; at 1 process, rank 0)
at 16 processes within 1.3x of those at 2; the last line prints the largest ratio as ``<ratio>x``.
Run: .venv/bin/python benchmarks/checkpoint_scale.py
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tracker_core import Tracker
from tracker_core.adapter import remove_other_saves, with_rank_files, write_rank_files

from helpers.small_entry import BATCH_SIZE, DATASET_SIZE, trained

WORLDS = (1, 2, 4, 8, 16)
ROUNDS = 15
BATCHES = 3
PROJECTED = (1_024, 16_384)
_METRICS = ("sent", "received", "written", "read", "save_s", "load_s")  # read: checkpoint file + own rank file
_LENGTH = 8  # the all_reduce (MAX) of the longest entry: 8 bytes each way
_FRAME = 8  # each entry's length before its pickle (tracker_core/distributed/_to_writer.py)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loader(world: int, rank: int) -> Any:
    """Each rank's shard holds ``DATASET_SIZE`` samples, at any world size."""
    data = TensorDataset(torch.arange(float(DATASET_SIZE * world)))
    return StatefulDataLoader(data, batch_size=BATCH_SIZE, sampler=DistributedSampler(data, world, rank, seed=0))


def _worker(rank: int, world: int, port: int, folder: str, results: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)
        loader = _loader(world, rank)
        tracker, _, _ = trained(BATCHES, loader)
        path = Path(folder) / "checkpoint.pt"
        rows: list[dict[str, float]] = []
        for _ in range(ROUNDS):
            dist.barrier()
            began = time.process_time()
            entry = tracker.gathered_state_dict()
            if rank == 0:
                split = write_rank_files(entry, path) if len(entry["ranks"]) > 1 else entry
                torch.save({"tracker": split}, path)
                if split is not entry:
                    remove_other_saves(path, split["ranks"]["save_id"])
            save_s = time.process_time() - began
            own = pickle.dumps(tracker.state_dict())
            if rank == 0:
                others = sum(_FRAME + len(pickle.dumps(part)) for part in entry["ranks"][1:])
                files = sum(f.stat().st_size for f in Path(folder).glob("checkpoint.pt.ranks/*/*.json"))
                sent, received, written = _LENGTH, _LENGTH + others, path.stat().st_size + files
            else:
                sent, received, written = _LENGTH + _FRAME + len(own), _LENGTH, 0
            dist.barrier()
            began = time.process_time()
            file = with_rank_files(torch.load(path, weights_only=True)["tracker"], path)  # read whole
            resumed, resumed_loader = Tracker(), _loader(world, rank)
            resumed.track_train_loader(resumed_loader)
            resumed.load_state_dict(file)
            load_s = time.process_time() - began
            rank_file = getattr(file["ranks"], "bytes_read", 0)
            rows.append(
                {
                    "sent": sent,
                    "received": received,
                    "written": written,
                    "read": path.stat().st_size + rank_file,
                    "rank_file": rank_file,
                    "save_s": save_s,
                    "load_s": load_s,
                    "file": path.stat().st_size,
                    "json": len(json.dumps(tracker.state_dict())),
                    "pickled": len(own),
                }
            )
            dist.barrier()
        results[rank] = {name: statistics.median(row[name] for row in rows) for name in rows[0]}
    finally:
        dist.destroy_process_group()


def _measure(world: int) -> list[dict[str, float]]:
    with mp.Manager() as manager, tempfile.TemporaryDirectory() as folder:
        results = manager.dict()
        mp.spawn(_worker, args=(world, _free_port(), folder, results), nprocs=world, join=True)
        return [dict(results[rank]) for rank in range(world)]


def _per_rank(ranks: list[dict[str, float]]) -> dict[str, float]:
    """The median over the ranks that do not write (rank 0 alone in a world of one)."""
    others = ranks[1:] or ranks
    return {name: statistics.median(rank[name] for rank in others) for name in ranks[0]}


def _kb(value: float) -> str:
    return f"{value / 1024:8.1f}"


def main() -> None:
    measured = {world: _measure(world) for world in WORLDS}
    print("per rank (median over ranks other than the writer): KB sent, received, written, read at load; CPU ms")
    print(
        f"{'procs':>5} {'sent':>8} {'recv':>8} {'written':>8} {'read':>8} {'save ms':>8} {'load ms':>8}"
        f" | writer: {'recv':>8} {'written':>8} {'save ms':>8} | checkpoint file, own rank file"
    )
    for world, ranks in measured.items():
        rank, writer = _per_rank(ranks), ranks[0]
        print(
            f"{world:>5} {_kb(rank['sent'])} {_kb(rank['received'])} {_kb(rank['written'])} {_kb(rank['read'])}"
            f" {rank['save_s'] * 1e3:8.2f} {rank['load_s'] * 1e3:8.2f}"
            f" | writer: {_kb(writer['received'])} {_kb(writer['written'])} {writer['save_s'] * 1e3:8.2f}"
            f" | {_kb(rank['file'])} KB, {_kb(rank['rank_file'])} KB"
        )
    largest = max(measured)
    entry = _per_rank(measured[largest])
    pickled, read = entry["pickled"], entry["read"]
    print(f"one rank's entry: {entry['json'] / 1024:.1f} KB as JSON, {pickled / 1024:.1f} KB pickled")
    # Projection from the per-entry cost: a rank sends one entry and reads the checkpoint (rank 0's entry and
    # the index) plus its own rank file; the writer receives every entry and writes one file per rank.
    per_entry_written = measured[largest][0]["written"] / largest
    for world in PROJECTED:
        print(
            f"projected at {world:>6} ranks: each rank sends {pickled / 1024:.1f} KB, receives 8 bytes, reads "
            f"{read / 1024:.1f} KB at load (with every entry in the checkpoint: {world * pickled / 2**20:.0f} MB); "
            f"the writer receives {(world - 1) * pickled / 2**20:.0f} MB and writes "
            f"{world * per_entry_written / 2**20:.0f} MB in {world} rank files"
        )
    two, sixteen = _per_rank(measured[2]), _per_rank(measured[16])
    ratios = {name: sixteen[name] / two[name] for name in _METRICS if two[name] > 0}
    worst = max(ratios, key=lambda name: ratios[name])
    print("per-rank ratio 16 / 2 processes: " + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items()))
    print(f"largest per-rank ratio ({worst}), 16 vs 2 processes:")
    print(f"{ratios[worst]:.2f}x")


if __name__ == "__main__":
    main()
