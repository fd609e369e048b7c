"""tools.gpu_run on a CPU: the plan it prints, the budget rule, the JSON it writes, the way it
runs a part (JSON out, timeout, failure) and the pip commands for the GPU machine's wheels.
The run itself needs CUDA (tools/gpu_run.py's docstring; docs/measured/gpu-run.md)."""

import json
import subprocess
import sys
import textwrap
import time
from dataclasses import asdict

import psutil
import pytest
import torch

from tools import gpu_run
from tools.gpu_run import Part, PartResult, run_plan

ROOT = gpu_run.ROOT


# --- the plan -------------------------------------------------------------------------------


def test_plan_holds_every_part_the_run_promises(tmp_path):
    parts = gpu_run.default_parts(tmp_path)
    names = [p.name for p in parts]
    assert names[0] == "pytest -m gpu"
    assert names[1] == "notebook 00_measure_your_machine", "00 first: it measures the ceilings"
    for nb in ("00", "01", "04", "06", "07", "12"):
        (part,) = [p for p in parts if p.kind == "notebook" and p.name.startswith(f"notebook {nb}_")]
        assert (ROOT / "notebooks" / f"{part.name.split()[1]}.ipynb").exists()
        assert "--run-notebook" in part.argv and str(tmp_path) in part.argv
    scripts = {p.argv[1]: p.argv[2:] for p in parts if p.kind == "benchmark"}
    assert scripts == {"benchmarks/attention.py": ("--gpu",), "benchmarks/prefetch.py": ("--gpu",),
                       "benchmarks/compute.py": ("--device", "cuda"),
                       "benchmarks/recompute.py": ("--gemm",)}
    assert all((ROOT / s).exists() for s in scripts)
    assert all(p.budget_s > 0 for p in parts) and len(set(names)) == len(names)
    assert all(p.budget_s <= gpu_run.TOTAL_S for p in parts)


def test_pytest_part_runs_only_gpu_marked_files():
    files = gpu_run.gpu_test_files()
    assert "tests/unit/test_flash_triton.py" in files and "tests/distributed/test_nccl_gpu.py" in files
    assert "tests/tools/test_gpu_run.py" not in files  # names the mark in strings only
    assert "tests/unit/test_stats.py" not in files


def test_gpu_mark_is_a_decorator_or_a_pytestmark(tmp_path):
    tests = tmp_path / "tests" / "unit"
    tests.mkdir(parents=True)
    planted = {"test_deco.py": "import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n",
               "test_module.py": "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.gpu]\n",
               "test_string.py": "def test_b():\n    assert 'pytest.mark.gpu' in 'x @pytest.mark.gpu'\n",
               "test_other.py": "import pytest\n\n@pytest.mark.gpus_many\ndef test_c():\n    pass\n",
               "helper_gpu.py": "import pytest\n\n@pytest.mark.gpu\ndef test_d():\n    pass\n"}
    for name, text in planted.items():
        (tests / name).write_text(text)
    assert gpu_run.gpu_test_files(tmp_path) == ["tests/unit/test_deco.py", "tests/unit/test_module.py"]


def test_dry_run_on_cpu_prints_the_plan_with_budgets_and_exits_0(tmp_path):
    # on a CUDA machine the bare command would start the run: ask for the plan there
    flag = ["--dry-run"] if torch.cuda.is_available() else []
    proc = subprocess.run([sys.executable, "-m", "tools.gpu_run", "--out", str(tmp_path), *flag],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert ("dry run" if flag else "no CUDA device here") in proc.stdout
    for part in gpu_run.default_parts(tmp_path):
        line = next(x for x in proc.stdout.splitlines() if part.name in x)
        assert f"budget {part.budget_s:>4.0f} s" in line and part.argv[-1] in line
    assert f"total budget {gpu_run.TOTAL_S:.0f} s" in proc.stdout
    assert not (tmp_path / "gpu_run.json").exists(), "a dry run measures nothing"


def test_dry_run_flag_and_only(capsys, tmp_path):
    assert gpu_run.main(["--dry-run", "--only", "12_attention", "prefetch", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "notebook 12_attention" in out and "benchmark prefetch" in out
    assert "notebook 06_compute" not in out and "pytest -m gpu" not in out
    with pytest.raises(SystemExit):
        gpu_run.main(["--dry-run", "--only", "nothing-of-that-name"])
    with pytest.raises(SystemExit):
        gpu_run.main(["--dry-run", "--total-s", "0"])


# --- the budget rule, with fake parts on a fake clock -----------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def fake_run(clock, takes):
    """A runner that 'runs' a part for ``takes[name]`` seconds (its budget if not given)."""
    ran = []

    def run(part):
        t = takes.get(part.name, part.budget_s)
        clock.now += t
        ran.append(part.name)
        return PartResult(part.name, part.kind, part.command, part.budget_s, "ok", t)
    return run, ran


def parts(*budgets):
    return [Part(f"p{i}", "benchmark", ("python", f"p{i}.py"), b) for i, b in enumerate(budgets)]


def test_a_part_whose_budget_exceeds_the_time_left_is_skipped_and_the_next_still_runs():
    clock = FakeClock()
    run, ran = fake_run(clock, {"p0": 250.0})
    res = run_plan(parts(300, 200, 100, 50), 400, run, clock=clock)
    # p0 took 250 s: 150 left; p1 (200) cannot fit, p2 (100) can, then 50 left for p3 (50)
    assert [r.status for r in res] == ["ok", "skipped", "ok", "ok"]
    assert ran == ["p0", "p2", "p3"]
    assert res[1].seconds == 0 and "200 s" in res[1].errors and "150 s left of 400 s" in res[1].errors


def test_the_whole_budget_counts_not_what_the_part_will_really_take():
    clock = FakeClock()
    run, ran = fake_run(clock, {"p0": 1.0, "p1": 1.0})  # they would be quick, but may take 100 s
    res = run_plan(parts(100, 100), 150, run, clock=clock)
    assert [r.status for r in res] == ["ok", "ok"]  # 149 s left for the second
    clock2 = FakeClock()
    run2, ran2 = fake_run(clock2, {"p0": 60.0})
    res2 = run_plan(parts(100, 100), 150, run2, clock=clock2)
    assert [r.status for r in res2] == ["ok", "skipped"] and ran2 == ["p0"]  # 90 s left < 100


def test_a_part_exactly_filling_what_is_left_runs():
    clock = FakeClock()
    run, ran = fake_run(clock, {})
    assert [r.status for r in run_plan(parts(100, 50, 1), 150, run, clock=clock)] == ["ok", "ok", "skipped"]


def test_done_sees_every_result_as_it_comes():
    clock = FakeClock()
    run, _ = fake_run(clock, {})
    seen = []
    run_plan(parts(10, 500, 10), 100, run, clock=clock, done=lambda rs: seen.append([r.status for r in rs]))
    assert seen == [["ok"], ["ok", "skipped"], ["ok", "skipped", "ok"]]


# --- the JSON file ----------------------------------------------------------------------------


def test_report_schema(tmp_path):
    clock = FakeClock()
    run, _ = fake_run(clock, {})
    results = run_plan(parts(10, 500), 100, run, clock=clock)
    results[0].output = {"hidden_fraction": 0.95}
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "machine_limits.json").write_text(json.dumps({"device": "cuda", "name": "NVIDIA H200"}))
    path = tmp_path / "gpu_run.json"
    gpu_run.write_report(path, results, 100.0, "2026-01-01T00:00:00+00:00", {"torch": "2.11"}, cache)
    rep = json.loads(path.read_text())
    assert set(rep) == {"schema", "started_at", "total_budget_s", "seconds", "machine", "limits",
                        "parts", "counts"}
    assert rep["schema"] == 1 and rep["total_budget_s"] == 100.0 and rep["seconds"] == 10.0
    assert rep["limits"] == {"device": "cuda", "name": "NVIDIA H200"}
    assert rep["counts"] == {"ok": 1, "failed": 0, "timeout": 0, "skipped": 1}
    for p in rep["parts"]:
        assert set(p) == {"name", "kind", "command", "budget_s", "status", "seconds", "output", "errors"}
        assert p["status"] in gpu_run.STATUSES
    assert rep["parts"][0]["output"] == {"hidden_fraction": 0.95}
    assert rep["parts"][1]["status"] == "skipped" and rep["parts"][1]["output"] is None
    assert not list(tmp_path.glob("*.tmp")), "written through a temporary file, then renamed"


def test_a_part_run_again_replaces_its_earlier_record_in_place(tmp_path):
    earlier = [asdict(PartResult(n, "benchmark", "c", 10.0, st, 5.0))
               for n, st in (("a", "ok"), ("b", "failed"), ("c", "skipped"))]
    again = [PartResult("b", "benchmark", "c", 10.0, "ok", 7.0),
             PartResult("d", "notebook", "c", 9.0, "ok", 1.0)]
    merged = gpu_run.merge_parts(earlier, again)
    assert [(p["name"], p["status"]) for p in merged] == [("a", "ok"), ("b", "ok"), ("c", "skipped"),
                                                          ("d", "ok")]
    rep = gpu_run.write_report(tmp_path / "r.json", again, 100.0, "t", {}, tmp_path, earlier)
    assert rep["counts"] == {"ok": 3, "failed": 0, "timeout": 0, "skipped": 1}
    assert rep["seconds"] == 5.0 + 7.0 + 5.0 + 1.0
    assert gpu_run.merge_parts([], again) == [asdict(r) for r in again]


def test_report_without_cached_limits(tmp_path):
    rep = gpu_run.write_report(tmp_path / "r.json", [], 10.0, "t", {}, tmp_path / "missing")
    assert rep["limits"] is None and rep["parts"] == [] and set(rep["counts"]) == set(gpu_run.STATUSES)


def test_last_json_takes_the_whole_output_or_its_last_json_line():
    assert gpu_run.last_json('{"a": 1,\n "b": [1, 2]}\n') == {"a": 1, "b": [1, 2]}  # indented
    assert gpu_run.last_json('warming up\n{"a": 1}\nnoise {\n{"a": 2}\ndone\n') == {"a": 2}
    assert gpu_run.last_json("no json here\n") is None and gpu_run.last_json("") is None


def test_junit_summary_counts_and_names_the_failures(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(textwrap.dedent("""\
        <?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
        <testcase classname="tests.unit.test_timing" name="test_ok" time="0.5"/>
        <testcase classname="tests.unit.test_x" name="test_bad" time="1.0">
          <failure message="assert 1 == 2">trace</failure></testcase>
        <testcase classname="tests.unit.test_x" name="test_err" time="0.1">
          <error message="fixture broke">trace</error></testcase>
        <testcase classname="tests.unit.test_y" name="test_skip" time="0">
          <skipped message="no triton"/></testcase>
        </testsuite></testsuites>"""))
    s = gpu_run.junit_summary(xml)
    assert (s["passed"], s["failed"], s["skipped"]) == (1, 2, 1)
    assert [p["test"] for p in s["problems"]] == ["tests.unit.test_x::test_bad",
                                                  "tests.unit.test_x::test_err"]
    assert s["problems"][0]["message"] == "assert 1 == 2"
    assert gpu_run.junit_summary(tmp_path / "missing.xml") is None
    (tmp_path / "broken.xml").write_text("<testsuite")
    assert gpu_run.junit_summary(tmp_path / "broken.xml") is None


# --- one part in a real process ---------------------------------------------------------------


def py_part(name, code, budget):
    return Part(name, "benchmark", (sys.executable, "-c", code), budget)


def test_run_part_keeps_the_json_a_part_prints(tmp_path):
    code = "import json; print('starting'); print(json.dumps({'x': 1.5}))"
    r = gpu_run.run_part(py_part("ok part", code, 60), tmp_path, gpu_run.part_env(tmp_path))
    assert (r.status, r.output, r.errors) == ("ok", {"x": 1.5}, "")
    assert r.command.startswith("python -c ")
    assert "starting" in (tmp_path / "logs" / "ok_part.stdout.log").read_text()


def test_run_part_reports_a_failure_with_its_stderr(tmp_path):
    code = "import sys; print('{\"partial\": true}'); sys.exit('broke: reason here')"
    r = gpu_run.run_part(py_part("bad", code, 60), tmp_path, gpu_run.part_env(tmp_path))
    assert r.status == "failed" and r.output == {"partial": True}
    assert r.errors.startswith("exit status 1") and "broke: reason here" in r.errors


def test_run_part_stops_a_part_at_its_budget_with_its_children(tmp_path):
    # the part starts a child that would outlive it (as torchrun's workers or a kernel would)
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
            "start_new_session=True); "  # as torchrun's workers: a session of its own
            "print('child', c.pid, flush=True); time.sleep(300)")
    t0 = time.monotonic()
    r = gpu_run.run_part(py_part("slow", code, 8), tmp_path, gpu_run.part_env(tmp_path))
    assert r.status == "timeout" and "stopped after its 8 s budget" in r.errors
    assert 8 <= time.monotonic() - t0 < 8 + 30  # the budget, then SIGTERM's grace at most
    line = next(x for x in (tmp_path / "logs" / "slow.stdout.log").read_text().splitlines()
                if x.startswith("child "))
    child = int(line.split()[1])
    gone = not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    assert gone, "the part's child outlived the part"


def test_run_part_that_cannot_start(tmp_path):
    r = gpu_run.run_part(Part("ghost", "benchmark", ("/no/such/program",), 5), tmp_path, {})
    assert r.status == "failed" and r.errors.startswith("could not start")


def test_part_env_makes_the_checkout_importable_and_picks_gloo_on_one_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = gpu_run.part_env(tmp_path, ["/wheels/site"], gpus=1)
    assert env["PYTHONPATH"].split(":") == ["/wheels/site", str(ROOT), "/elsewhere"]
    assert env["PERFKIT_QUICK"] == "1" and env["PERFKIT_TEST_IMITATE"] == ""
    assert env["PERFKIT_CACHE"] == str(tmp_path / "cache") and env["PERFKIT_BACKEND"] == "gloo"
    monkeypatch.delenv("PERFKIT_BACKEND", raising=False)
    assert "PERFKIT_BACKEND" not in gpu_run.part_env(tmp_path, gpus=2)


# --- wheels for the GPU machine ---------------------------------------------------------------


def test_download_argv_asks_for_the_gpu_machines_python_and_platform(tmp_path):
    argv = gpu_run.download_argv(tmp_path, "3.12")
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv  # a source build here would be for this machine
    i = argv.index("--python-version")
    assert argv[i + 1] == "3.12" and argv[argv.index("--abi") + 1] == "cp312"
    assert argv[argv.index("--implementation") + 1] == "cp"
    assert argv[argv.index("--dest") + 1] == str(tmp_path)
    platforms = [argv[j + 1] for j, a in enumerate(argv) if a == "--platform"]
    assert "manylinux2014_x86_64" in platforms and all(p.endswith("x86_64") for p in platforms)
    assert set(gpu_run.WHEELS) <= set(argv)
    assert {"papermill", "nbformat", "nbclient", "ipykernel"} <= set(gpu_run.WHEELS)
    assert gpu_run.download_argv(tmp_path, "3.11")[i + 1] == "3.11"


def test_install_wheels_offline_into_the_environment_else_a_target(tmp_path):
    calls = []

    def pip(codes):
        def run(argv):
            calls.append(argv)
            return codes[len(calls) - 1]
        return run

    assert gpu_run.install_wheels(tmp_path / "w", tmp_path / "site", pip([0])) == []
    (first,) = calls
    assert "--no-index" in first and first[first.index("--find-links") + 1] == str(tmp_path / "w")
    assert "--target" not in first and set(gpu_run.WHEELS) <= set(first)
    calls.clear()
    assert gpu_run.install_wheels(tmp_path / "w", tmp_path / "site", pip([1, 0])) == [str(tmp_path / "site")]
    assert calls[1][calls[1].index("--target") + 1] == str(tmp_path / "site") and "--no-index" in calls[1]
    calls.clear()
    with pytest.raises(RuntimeError, match="could not install"):
        gpu_run.install_wheels(tmp_path / "w", tmp_path / "site", pip([1, 1]))


# --- the whole command, on a CUDA machine imitated -------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpu_run, "machine", lambda: {"device": "imitated"})


def test_main_runs_the_parts_writes_the_json_and_fails_on_a_failed_part(tmp_path, fake_gpu, monkeypatch):
    code = {"good": "import json; print(json.dumps({'v': 1}))", "bad": "raise SystemExit(3)"}
    monkeypatch.setattr(gpu_run, "default_parts", lambda out: [py_part(n, c, 60) for n, c in code.items()])
    assert gpu_run.main(["--out", str(tmp_path)]) == 1
    rep = json.loads((tmp_path / "gpu_run.json").read_text())
    assert rep["machine"] == {"device": "imitated"}
    assert [(p["name"], p["status"], p["output"]) for p in rep["parts"]] == [
        ("good", "ok", {"v": 1}), ("bad", "failed", None)]
    code["bad"] = "print('{\"fixed\": 1}')"
    assert gpu_run.main(["--out", str(tmp_path), "--only", "bad"]) == 0  # run again: now it works
    rep = json.loads((tmp_path / "gpu_run.json").read_text())
    assert [(p["name"], p["status"]) for p in rep["parts"]] == [("good", "ok"), ("bad", "ok")]


def test_a_notebook_part_runs_through_run_course(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("QUICK = False"),
                nbformat.v4.new_code_cell("import os\nprint('quick', QUICK, os.environ['PERFKIT_QUICK'])")]
    nb.cells[0].metadata["tags"] = ["parameters"]
    src = tmp_path / "tiny.ipynb"
    nbformat.write(nb, src)
    out = tmp_path / "out"
    part = Part("notebook tiny", "notebook", (sys.executable, "-m", "tools.gpu_run", "--run-notebook",
                                              str(src), "--out", str(out), "--limit-s", "240"), 240)
    r = gpu_run.run_part(part, out, gpu_run.part_env(out))
    assert r.status == "ok", r.errors
    assert r.output["name"] == "tiny" and r.output["status"] == "ok"
    done = nbformat.read(out / "tiny.ipynb", as_version=4)
    assert "quick True 1" in done.cells[-1].outputs[0]["text"]  # QUICK injected, env passed on
