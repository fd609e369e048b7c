"""perfkit.dist through real torchrun: results in rank order, clean exits, errors, timeouts."""

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from perfkit import dist

pytestmark = pytest.mark.distributed
WORKER = str(Path(__file__).with_name("_selftest_worker.py"))


def test_twenty_jobs_exit_zero_with_results_in_rank_order():
    # 20 launches, two at a time (this also proves concurrent jobs never share a port).
    # launch() raises WorkerError on any non-zero exit (a SIGABRT at teardown included).
    def one(_: int) -> list:
        return dist.launch(WORKER, nproc=2, timeout_s=120)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as ex:
        runs = list(ex.map(one, range(20)))
    assert len(runs) == 20
    for results in runs:
        assert [r["rank"] for r in results] == [0, 1]
        assert all(r["world"] == 2 and r["sum"] == [3.0] * 4 for r in results)
    print(f"20 jobs in {time.perf_counter() - t0:.1f} s")


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
    with pytest.raises(dist.LaunchTimeout):
        dist.launch(WORKER, nproc=2, args=["--mode", "hang", "--tag", tag], timeout_s=12)
    assert time.perf_counter() - t0 < 12 + 10  # SIGTERM, 3 s grace, SIGKILL
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
