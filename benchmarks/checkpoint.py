"""Checkpoint costs on this machine: synchronous and asynchronous saves, 20 kills during saves,
where to write, and the starting documents' "<1 s checkpoint save time". Prints one JSON object.

* ``async``: an MLP and its AdamW state (float32, ``--mib`` of parameters, so about 3x that
  saved) trained on one process (a one-rank gloo group: DCP's process executor needs one).
  For each mode of ``perfkit.saving.Checkpointer`` and ``--rounds`` saves: the seconds the
  step was blocked, the persist time, the training steps' median while a persist ran against
  the steps without one, and the peak RSS (this process and its children, sampled every
  10 ms). The floor is the state's bytes copied once at the copy rate measured here
  (``perfkit.hw.measure_copy``, which counts read and written bytes: a copy of S bytes moves
  2S). Target: blocked <= 25% of the synchronous save.
* ``kills``: 20 forked children train a small state and save it every step (sync mode); each
  is SIGKILLed at a random moment (uniform in 0.2-1.2 s after its first save); the parent
  loads the latest checkpoint and checks it is a complete one, bit for bit the state of its
  step. Target: 20 of 20 resume from a complete checkpoint, 0 load a partial one.
* ``restart``: the restart cost R of ``examples/resilient_train.py`` (2 ranks, torch DDP,
  rank 1 SIGKILLed; ``torchrun --max-restarts 3``) from the kill to the end of the first
  resumed step, split into rendezvous (kill -> new worker process), process start and
  imports, joining the process group, building the model, load, first step.
* ``storage``: ``perfkit.saving.storage.write_bandwidth`` into /dev/shm and /tmp with and
  without fsync, their filesystems and what survives there.
* ``claims``: the tiny GPT of ``perfkit.models`` saved synchronously (with fsync) against
  "<1 s"; a real model's state (Llama 3 8B: 8.03e9 parameters, 14 bytes each with bf16
  weights, fp32 master copy and Adam's two moments) at the measured fsync write bandwidth.

Run: ``.venv/bin/python benchmarks/checkpoint.py`` (about 2 minutes on 2 busy cores;
``--quick`` or ``PERFKIT_QUICK=1`` for a smaller state, fewer rounds and kills; ``--store
benchmarks/stored/checkpoint.json`` keeps the run, with its command, for notebook 14).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from perfkit import hw, models
from perfkit.saving import (
    Checkpointer,
    TrainState,
    latest,
    save_seconds,
    small_state,
    small_step,
    survives,
    verify,
    write_bandwidth,
)
from perfkit.timing import Timer

LLAMA3_8B_PARAMS, BYTES_PER_PARAM = 8.03e9, 14  # bf16 weights + fp32 master + Adam m, v


class PeakRss:
    """The largest RSS of this process plus its children, sampled every 10 ms in a thread."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                rss = me.memory_info().rss + sum(c.memory_info().rss for c in me.children(recursive=True))
            except psutil.Error:
                rss = 0
            self.peak = max(self.peak, rss)
            time.sleep(0.01)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def mlp(mib: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    width = 1024
    layers = max(1, mib * 2**20 // (4 * width * width))
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    return m, opt, torch.randn(32, width)


def step(m, opt, x) -> float:
    with Timer("cpu") as t:
        m(x).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return t.elapsed_s


def async_costs(root: Path, mib: int, rounds: int) -> dict:
    m, opt, x = mlp(mib)
    for _ in range(2):
        step(m, opt, x)  # creates Adam's state: the saved state has its full size
    state_bytes = sum(t.numel() * t.element_size() for t in m.state_dict().values())
    state_bytes += sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values()
                       if torch.is_tensor(t))
    copy = hw.measure_copy(min(state_bytes, 256 * 2**20), repeat=3)
    floor_s = 2 * state_bytes / copy.best_bytes_per_s
    quiet = [step(m, opt, x) for _ in range(5)]
    out = {"state_bytes": state_bytes, "copy_bytes_per_s": copy.best_bytes_per_s, "floor_s": floor_s,
           "step_s_without_persist": statistics.median(quiet), "modes": {}}
    n = 0
    for mode in ("sync", "thread", "process"):
        st = TrainState(m, opt)
        ck = Checkpointer(root / mode, keep=1, mode=mode)
        if mode == "process":  # the first save starts DCP's writer process: not a steady cost
            n += 1
            ck.save(n, st)
            ck.wait()
        blocked, persist, during = [], [], []
        with PeakRss() as rss:
            for _ in range(rounds):
                n += 1
                rec = ck.save(n, st)
                while ck.in_flight:
                    during.append(step(m, opt, x))
                ck.wait()
                blocked.append(rec.blocked_s)
                persist.append(rec.persist_s)
        ck.close()
        out["modes"][mode] = {"blocked_s": blocked, "persist_s": persist,
                              "median_blocked_s": statistics.median(blocked),
                              "steps_during_persist": len(during),
                              "step_s_during_persist": statistics.median(during) if during else None,
                              "peak_rss_bytes": rss.peak}
    sync = out["modes"]["sync"]["median_blocked_s"]
    for mode in ("thread", "process"):
        r = out["modes"][mode]
        r["blocked_over_sync"] = r["median_blocked_s"] / sync
        r["target_blocked_at_most_25pct_of_sync"] = r["blocked_over_sync"] <= 0.25
        r["blocked_over_floor"] = r["median_blocked_s"] / floor_s
    return out


def _saver(root: str, conn) -> None:
    m, opt = small_state(0)
    st = TrainState(m, opt)
    ck = Checkpointer(root, keep=2)
    s = 0
    while True:
        s += 1
        small_step(m, opt, s)  # the state equals small_state(s), bit for bit
        st.step = s
        ck.save(s, st)
        conn.send(s)


def one_kill(root: Path, rng: random.Random) -> dict:
    parent, child = multiprocessing.Pipe()
    p = multiprocessing.get_context("fork").Process(target=_saver, args=(str(root), child))
    p.start()
    committed = [parent.recv()]  # the first complete save
    time.sleep(rng.uniform(0.2, 1.2))
    mid_save = any(d.name.endswith(".partial") for d in root.iterdir())
    os.kill(p.pid, signal.SIGKILL)
    p.join(timeout=30)
    while parent.poll():
        committed.append(parent.recv())
    m, opt = small_state(0)
    st = TrainState(m, opt)
    try:
        loaded = Checkpointer(root).load_latest(st)
        verify(latest(root))
    except Exception as e:  # a partial or corrupt checkpoint: what must never happen
        return {"ok": False, "partial_loaded": True, "error": str(e)}
    want, _ = small_state(loaded)
    exact = all(torch.equal(a, b) for a, b in zip(m.parameters(), want.parameters()))
    # the kill may fall after a commit and before the child reported it: one step more
    previous = loaded in (committed[-1], committed[-1] + 1)
    return {"ok": exact and previous, "partial_loaded": not exact, "loaded": loaded,
            "last_reported": committed[-1], "partial_dir_at_kill": mid_save}


def kills(base: Path, n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        root = base / f"kill{i}"
        root.mkdir()
        runs.append(one_kill(root, rng))
        shutil.rmtree(root, ignore_errors=True)
    return {"kills": n, "resumed_from_previous_complete": sum(r["ok"] for r in runs),
            "loaded_a_partial": sum(r["partial_loaded"] for r in runs),
            "killed_with_a_partial_dir": sum(r.get("partial_dir_at_kill", False) for r in runs),
            "target_met": all(r["ok"] for r in runs) and not any(r["partial_loaded"] for r in runs),
            "runs": runs}


def restarts(base: Path, n: int) -> dict:
    """The restart cost R of examples/resilient_train.py on 2 ranks under launch(max_restarts=3),
    rank 1 SIGKILLed at step 7: each part's median over ``n`` runs (s)."""
    import importlib.util

    from perfkit import dist as pdist

    path = Path(__file__).resolve().parents[1] / "examples" / "resilient_train.py"
    spec = importlib.util.spec_from_file_location("resilient_train", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    runs = []
    for i in range(n):
        out = base / f"restart{i}"
        pdist.launch(str(path), 2, ["--root", out / "ck", "--out", out, "--steps", 12, "--save-every", 3,
                                    "--kill-rank", 1, "--kill-step", 7], timeout_s=300, max_restarts=3)
        events = [[json.loads(line) for line in (out / f"events.rank{r}.jsonl").read_text().splitlines()]
                  for r in (0, 1)]
        runs.append(example.restart_cost(events[0], events[1]))
    return {"runs": runs, "median_s": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
            "parts": list(example.PARTS)}


def storage(nbytes: int) -> dict:
    out = {}
    for d in ("/dev/shm", tempfile.gettempdir()):
        if not Path(d).is_dir():
            continue
        for fsync in (False, True):
            r = write_bandwidth(d, nbytes, fsync=fsync, repeat=3)
            out[f"{d} fsync={fsync}"] = {"fstype": r.fstype, "mountpoint": r.mountpoint,
                                         "bytes_per_s": r.bytes_per_s, "times_s": list(r.times_s),
                                         "survives": survives(r.fstype)}
    return out


def claims(root: Path, fsync_bytes_per_s: float) -> dict:
    gpt = models.tiny_gpt2()
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
    x = torch.randint(0, 1024, (2, 64))
    gpt(x, labels=x).loss.backward()
    opt.step()
    times = []
    with Checkpointer(root / "gpt", keep=1) as ck:
        for s in range(1, 4):
            times.append(ck.save(s, TrainState(gpt, opt)).blocked_s)
    big = LLAMA3_8B_PARAMS * BYTES_PER_PARAM
    big_s = save_seconds(big, fsync_bytes_per_s)
    return {"tiny_gpt": {"bytes": verify(latest(root / "gpt")).bytes, "save_s": times,
                         "under_1s": statistics.median(times) < 1.0},
            "llama3_8b": {"bytes": big, "write_bytes_per_s": fsync_bytes_per_s, "save_s_floor": big_s,
                          "under_1s": big_s < 1.0,
                          "note": "one writer at this machine's fsync bandwidth; N nodes writing in "
                                  "parallel to storage that scales divide it by N"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--mib", type=int, default=64, help="MiB of parameters (float32)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--store", help="also write the JSON with its command, date and load here "
                                   "(notebook 14 reads benchmarks/stored/checkpoint.json)")
    a = p.parse_args()
    t0, load0 = time.time(), os.getloadavg()[0]
    quick = a.quick or os.environ.get("PERFKIT_QUICK") == "1"
    mib, rounds, n_kills = (16, 2, 5) if quick else (a.mib, a.rounds, a.kills)
    torch.set_num_threads(1)
    base = Path(tempfile.mkdtemp(prefix="perfkit-ckpt-bench-"))
    try:
        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        result = {"async": async_costs(base, mib, rounds)}
        dist.destroy_process_group()
        result["kills"] = kills(base, n_kills)
        result["restart"] = restarts(base, 1 if quick else 3)
        result["storage"] = storage(64 * 2**20)
        fsync_rates = [v["bytes_per_s"] for k, v in result["storage"].items()
                       if k.endswith("fsync=True") and v["fstype"] not in ("tmpfs", "ramfs")]
        result["claims"] = claims(base, max(fsync_rates) if fsync_rates else 1e9)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if a.store:  # a sibling script: importable when this one runs as a script, from benchmarks/
        from checkpoint_stored import write_stored

        write_stored(a.store, result, t0, load0)


if __name__ == "__main__":
    main()
