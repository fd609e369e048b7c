"""Saving and restarting under real torchrun, 2 processes (gloo, float64, torch DDP).

Round trip (tests/distributed/_saving_roundtrip_worker.py): each Checkpointer mode (sync,
thread, process) saves on 2 ranks; rank 0's manifest lists both ranks' DCP files and world
size 2; fresh objects built with other seeds load it and the next 3 losses, the parameters
and the optimizer's moments equal the uninterrupted run's bit for bit.

Restart (examples/resilient_train.py under ``torchrun --max-restarts 3 --rdzv-backend
c10d``): rank 1 SIGKILLs itself at the start of step 7 in the first attempt; torchrun
restarts both ranks, which resume from the last complete checkpoint. Every loss (before the
kill and after the resume), the final parameters and the optimizer state equal an
uninterrupted run's, bit for bit, in sync and thread modes. The test first checks that the
run really was killed and resumed from a step above 0 (a run that silently restarted from
scratch would otherwise pass), and that the restart cost's parts are positive and add up.

Elastic: two torchrun agents (``--nnodes 1:2``, one rank each, a shared c10d endpoint);
the second agent (not the one hosting the rendezvous store) and its worker are SIGKILLed;
the first restarts alone, on 1 rank, loads the checkpoint the 2 ranks saved and trains to
the end.

Preemption: SIGTERM to every worker (as Slurm or a container runtime sends it) saves the
step in progress and the job exits 0; SIGTERM to torchrun itself (which forwards it) saves
the same way, though torchrun reports its own signal with exit status 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import torch

from perfkit import dist
from perfkit.saving import latest, step_dir, verify
from perfkit.torchrun import torchrun_command

pytestmark = pytest.mark.distributed
HERE = Path(__file__).parent
EXAMPLE = HERE.parents[1] / "examples" / "resilient_train.py"
ROUNDTRIP = str(HERE / "_saving_roundtrip_worker.py")
STEPS, SAVE_EVERY, KILL_STEP = 12, 3, 7
# both agents join the first round (the second starts within 10 s of the first, imports
# included, on a loaded machine); a dead agent is dropped after 2 missed 1 s heartbeats
RDZV_CONF = "last_call_timeout=10,join_timeout=120,keep_alive_interval=1,keep_alive_max_attempt=2"


def example_module():
    spec = importlib.util.spec_from_file_location("resilient_train", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train(tmp: Path, mode: str = "sync", kill: bool = False) -> Path:
    """Run the example to the end under launch(max_restarts=3); return its output folder."""
    out = tmp / f"{mode}-{'killed' if kill else 'whole'}"
    args = ["--root", out / "ck", "--out", out, "--steps", STEPS, "--save-every", SAVE_EVERY,
            "--mode", mode]
    if kill:
        args += ["--kill-rank", 1, "--kill-step", KILL_STEP]
    dist.launch(str(EXAMPLE), 2, args, timeout_s=300, max_restarts=3)
    return out


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory):
    cfg = {"root": str(tmp_path_factory.mktemp("roundtrip")), "modes": ["sync", "thread", "process"]}
    return dist.launch(ROUNDTRIP, 2, ["--config", json.dumps(cfg)], timeout_s=300)


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return train(tmp_path_factory.mktemp("whole"))


@pytest.mark.parametrize("mode", ["sync", "thread", "process"])
def test_save_on_two_ranks_loads_bit_exact(roundtrip, mode):
    for rank, res in enumerate(roundtrip):
        r = res[mode]
        assert r["loaded"] == 3 and r["n_tensors"] == 16
        assert r["losses_equal"], f"rank {rank}: {r['got']} != {r['ref']}"
        assert r["tensors_equal"], f"rank {rank}: parameters or optimizer state differ"
    m = roundtrip[0][mode]["manifest"]
    assert m["step"] == 3 and m["world_size"] == 2
    assert m["files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert roundtrip[1][mode]["manifest"] is None  # rank 0 commits


@pytest.mark.parametrize("mode", ["sync", "thread"])
def test_killed_and_restarted_run_equals_the_uninterrupted_one(whole, tmp_path, mode):
    killed = train(tmp_path, mode, kill=True)
    events = {r: read_jsonl(killed / f"events.rank{r}.jsonl") for r in (0, 1)}
    kills = [e for e in events[1] if e["event"] == "kill"]
    assert len(kills) == 1 and kills[0]["step"] == KILL_STEP and kills[0]["attempt"] == 0
    resumed = [e for e in events[0] if e["event"] == "loaded" and e["attempt"] > 0]
    assert resumed and 0 < resumed[-1]["step"] <= KILL_STEP, "the run did not resume from a checkpoint"
    for r in (0, 1):
        ref = {e["step"]: e["loss"] for e in read_jsonl(whole / f"loss.rank{r}.jsonl")}
        got = read_jsonl(killed / f"loss.rank{r}.jsonl")
        assert {e["step"] for e in got} == set(range(STEPS))
        assert [e for e in got if e["loss"] != ref[e["step"]]] == [], f"rank {r}: losses differ"
        a = torch.load(whole / f"final.rank{r}.pt")
        b = torch.load(killed / f"final.rank{r}.pt")
        for part in ("model", "optim"):
            fa, fb = flatten(a[part]), flatten(b[part])
            assert fa.keys() == fb.keys() and fa, part
            for k in fa:
                assert (torch.equal(fa[k], fb[k]) if torch.is_tensor(fa[k]) else fa[k] == fb[k]), (r, part, k)
    cost = example_module().restart_cost(events[0], events[1])
    parts = [cost[p] for p in example_module().PARTS]
    assert all(p > 0 for p in parts[1:]) and parts[0] > 0
    assert abs(sum(parts) - cost["total"]) < 1e-6
    verify(latest(killed / "ck"))


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        elif isinstance(v, list):
            out.update(flatten(dict(enumerate(v)), f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


@pytest.mark.parametrize("target", ["workers", "torchrun"])
def test_sigterm_saves_at_the_next_step_boundary_and_exits(tmp_path, target):
    out = tmp_path / "run"
    cmd = torchrun_command(str(EXAMPLE), 2, ["--root", out / "ck", "--out", out, "--steps", 200,
                                             "--save-every", 50, "--step-sleep", 0.1])
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / "log.txt", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        losses = out / "loss.rank0.jsonl"
        deadline = time.monotonic() + 180
        while not (losses.exists() and len(losses.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "log.txt").read_text()
            time.sleep(0.1)
        if target == "torchrun":
            proc.send_signal(signal.SIGTERM)
        else:
            for child in psutil.Process(proc.pid).children():
                child.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=120)
    finally:
        dist.end_process_tree(proc.pid, grace_s=0)
    assert rc == (0 if target == "workers" else 1), (tmp_path / "log.txt").read_text()[-3000:]
    stops = [[e for e in read_jsonl(out / f"events.rank{r}.jsonl") if e["event"] == "preempted"]
             for r in (0, 1)]
    assert len(stops[0]) == len(stops[1]) == 1 and stops[0][0]["step"] == stops[1][0]["step"]
    step = stops[0][0]["step"]
    assert 3 <= step < 200 and latest(out / "ck") == step_dir(out / "ck", step)
    assert verify(latest(out / "ck")).step == step
    last = read_jsonl(out / "loss.rank0.jsonl")[-1]["step"]
    assert last == step - 1, "the run went on past the step boundary after the signal"


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 120.0) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.1)


def test_elastic_job_continues_on_fewer_ranks(tmp_path):
    import socket
    import uuid

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out, rid = tmp_path / "run", uuid.uuid4().hex
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])}
    agents = []
    try:
        for node in range(2):
            cmd = torchrun_command(str(EXAMPLE), 1, ["--root", out / "ck", "--out", out, "--steps", 24,
                                                     "--save-every", 3, "--step-sleep", 0.1],
                                   max_restarts=3, nnodes="1:2", rdzv_endpoint=f"127.0.0.1:{port}",
                                   rdzv_id=rid, rdzv_conf=RDZV_CONF)
            with open(tmp_path / f"agent{node}.log", "wb") as log:
                agents.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))
            if node == 0:  # the first agent hosts the rendezvous store: the one kept alive
                wait_for_port(port, agents[0], tmp_path / "agent0.log")
        losses = out / "loss.rank1.jsonl"
        deadline = time.monotonic() + 180
        while not (losses.exists() and len(losses.read_text().splitlines()) >= 8):
            alive = agents[0].poll() is None
            assert time.monotonic() < deadline and alive, (tmp_path / "agent0.log").read_text()
            time.sleep(0.1)
        dist.end_process_tree(agents[1].pid, grace_s=0)  # the agent and its worker
        rc = agents[0].wait(timeout=240)
    finally:
        for a in agents:
            dist.end_process_tree(a.pid, grace_s=0)
    assert rc == 0, (tmp_path / "agent0.log").read_text()[-3000:]
    ev = read_jsonl(out / "events.rank0.jsonl")
    worlds = {e["attempt"]: e["world_size"] for e in ev if e["event"] == "joined"}
    last = max(worlds)
    assert worlds[0] == 2 and worlds[last] == 1
    saved_by_two = [e["step"] for e in ev if e["event"] == "saved" and e["attempt"] == 0]
    loaded = [e["step"] for e in ev if e["event"] == "loaded" and e["attempt"] == last][0]
    assert loaded > 0 and loaded <= max(saved_by_two)
    steps = [e["step"] for e in read_jsonl(out / "loss.rank0.jsonl") if e["attempt"] == last]
    assert steps == list(range(loaded, 24))
    assert [e for e in ev if e["event"] == "done"][-1]["step"] == 24
