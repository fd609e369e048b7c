"""perfkit.dist through real torchrun: results in rank order, clean exits, errors, timeouts."""

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
WORKER = str(Path(__file__).with_name("_selftest_worker.py"))


def test_six_jobs_exit_zero_with_results_in_rank_order():
    # 6 launches, two at a time (this also proves concurrent jobs never share a port).
    # launch() raises WorkerError on any non-zero exit (a SIGABRT at teardown included).
    # (20 launches cost 46 s of make test's budget; every other distributed test launches too)
    def one(_: int) -> list:
        return dist.launch(WORKER, nproc=2, timeout_s=120)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as ex:
        runs = list(ex.map(one, range(6)))
    assert len(runs) == 6
    for results in runs:
        assert [r["rank"] for r in results] == [0, 1]
        assert all(r["world"] == 2 and r["sum"] == [3.0] * 4 for r in results)
    print(f"6 jobs in {time.perf_counter() - t0:.1f} s")


def test_failing_rank_traceback_is_in_the_exception():
    with pytest.raises(dist.WorkerError) as info:
        dist.launch(WORKER, nproc=2, args=["--mode", "fail"], timeout_s=120)
    e = info.value
    assert e.rank == 1
    assert "ValueError: rank 1 fails on purpose" in e.worker_traceback
    assert "rank 1 fails on purpose" in str(e)
    assert e.returncode != 0


def test_exit_before_init_is_reported():
    with pytest.raises(dist.WorkerError) as info:
        dist.launch(WORKER, nproc=2, args=["--mode", "noinit"], timeout_s=120)
    assert info.value.rank is None  # no traceback file: the output tail is all there is
    assert "exitcode" in str(info.value)


def test_timeout_kills_every_process():
    tag = uuid.uuid4().hex
    t0 = time.perf_counter()
    with pytest.raises(dist.LaunchTimeout) as err:
        dist.launch(WORKER, nproc=2, args=["--mode", "hang", "--tag", tag], timeout_s=12)
    assert time.perf_counter() - t0 < 12 + 12  # stacks (2 s), SIGTERM, 3 s grace, SIGKILL
    # each rank said where it waited: rank 1 in its sleep, rank 0 in shutdown's barrier
    # each rank that got past init_worker in time said where it waited (a cold start can
    # spend the 12 s importing torch: then there is no stack to ask for)
    msg = str(err.value)
    waiting = msg.count(" waits\n")
    assert msg.count("_selftest_worker.py\", line") >= waiting, msg[-2000:]
    if "rank 0 waits" in msg:
        assert "in barrier" in msg, msg[-2000:]  # rank 0: in shutdown's barrier
    left = [p for p in psutil.process_iter(["cmdline"]) if tag in " ".join(p.info["cmdline"] or [])]
    assert left == [], f"processes survived the timeout: {left}"


def test_bad_arguments_raise_before_launching():
    with pytest.raises(ValueError, match="nproc"):
        dist.launch(WORKER, nproc=0)
    with pytest.raises(ValueError, match="timeout_s"):
        dist.launch(WORKER, timeout_s=0)
    with pytest.raises(ValueError, match="no such file"):
        dist.launch("does/not/exist.py")
    with pytest.raises(ValueError, match="backend"):
        dist.launch(WORKER, backend="mpi")
    with pytest.raises(TypeError, match="target"):
        dist.launch(None)  # type: ignore[arg-type]


def test_init_worker_outside_torchrun_explains(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(RuntimeError, match="torchrun"):
        dist.init_worker()


def test_worker_result_needs_json(monkeypatch, tmp_path):
    monkeypatch.setenv(dist.RESULT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    dist.worker_result({"x": [1, 2]})
    assert (tmp_path / "rank3.json").read_text() == '{"x": [1, 2]}'
    with pytest.raises(TypeError, match="JSON"):
        dist.worker_result({"x": object()})


def _tree(ignore_term: bool) -> tuple["psutil.Popen", list[int]]:
    """A shell whose grandchild sleeps in a session of its own (as torchrun's workers do);
    with ``ignore_term`` every process ignores SIGTERM, so only SIGKILL ends it."""
    import subprocess
    import sys

    trap = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " if ignore_term else ""
    leaf = f"{trap}import time; time.sleep(120)"
    mid = (f"{trap}import subprocess, sys, time; "
           f"subprocess.Popen([sys.executable, '-c', {leaf!r}], start_new_session=True); "
           "time.sleep(120)")
    root = psutil.Popen([sys.executable, "-c", mid], stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while len(root.children(recursive=True)) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [root.pid] + [c.pid for c in root.children(recursive=True)]
    assert len(pids) == 2, "the tree did not start"
    return root, pids


def _gone(pids: list[int]) -> bool:
    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
               for p in pids)


@pytest.mark.parametrize("ignore_term, grace_s", [(False, 3.0), (True, 0.5), (False, 0.0)])
def test_end_process_tree_ends_the_root_and_descendants_in_other_sessions(ignore_term, grace_s):
    root, pids = _tree(ignore_term)
    t0 = time.monotonic()
    dist.end_process_tree(root.pid, grace_s=grace_s)
    root.wait(timeout=10)
    assert _gone(pids), [psutil.Process(p).status() for p in pids if psutil.pid_exists(p)]
    # SIGTERM-ignoring processes cost the grace period, then SIGKILL: never a hang
    assert time.monotonic() - t0 < grace_s + 8


def test_end_process_tree_without_pid_ends_only_this_process_children():
    # in a process of its own: in pytest's, it would also end what other tests started
    import subprocess
    import sys

    script = (
        "import json, subprocess, sys, time, psutil\n"
        "from perfkit import dist\n"
        "leaf = 'import time; time.sleep(120)'\n"
        "mid = ('import subprocess, sys, time; subprocess.Popen([sys.executable, \"-c\", '\n"
        "       + repr(leaf) + '], start_new_session=True); time.sleep(120)')\n"
        "kid = subprocess.Popen([sys.executable, '-c', mid])\n"
        "while len(psutil.Process().children(recursive=True)) < 2: time.sleep(0.05)\n"
        "pids = [p.pid for p in psutil.Process().children(recursive=True)]\n"
        "dist.end_process_tree(grace_s=1.0)\n"
        "kid.wait(timeout=10)\n"
        "dist.end_process_tree(grace_s=0)\n"  # nothing left to end: a no-op
        "dist.end_process_tree(2 ** 22 + 12345)\n"  # no such process: nothing to do
        "print(json.dumps(pids))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr  # it ended its children, not itself
    pids = json.loads(out.stdout)
    assert len(pids) == 2 and _gone(pids)


@pytest.mark.parametrize("kw, exc, match", [
    ({"pid": 0}, ValueError, "pid must be an int >= 1"),
    ({"pid": "1"}, TypeError, "pid"),
    ({"pid": True}, ValueError, "pid"),
    ({"grace_s": -1.0}, ValueError, "grace_s must be a finite number >= 0"),
    ({"grace_s": float("inf")}, ValueError, "grace_s"),
    ({"grace_s": None}, TypeError, "grace_s"),
])
def test_end_process_tree_rejects_bad_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        dist.end_process_tree(**kw)
