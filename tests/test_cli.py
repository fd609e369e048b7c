"""``python -m perfkit``: help lists the commands, ``limits`` shows cached ceilings."""

import json
import subprocess
import sys
from pathlib import Path

from perfkit import hw
from perfkit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def limits_file(tmp_path):
    limits = hw.MachineLimits(device=str(hw.resolve_device(None)),
                              name=hw.device_name(hw.resolve_device(None)),
                              matmul_flops={"float32": 2.5e10, "bfloat16": 5e10},
                              copy_bytes_per_s=1.25e10, measured_at="2026-01-01T00:00:00+00:00",
                              cache_bytes_per_s=5e10, llc_bytes=32 << 20, method=hw.METHOD)
    return hw.save_limits(limits, tmp_path / "limits.json")


def test_module_help_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "perfkit", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "limits" in out.stdout


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "limits" in capsys.readouterr().out


def test_limits_shows_the_cached_ceilings_without_measuring(tmp_path, capsys):
    path = limits_file(tmp_path)
    assert main(["limits", "--path", str(path)]) == 0
    out = capsys.readouterr().out
    assert "25 GFLOP/s" in out and "50 GFLOP/s" in out and "12.5 GB/s" in out
    assert "ridge point     2.0 FLOP/byte" in out  # 25e9 / 12.5e9
    assert "50 GB/s" in out and "33.6 MB" in out  # the cache ceiling and the cache size


def test_limits_json_is_the_record(tmp_path, capsys):
    path = limits_file(tmp_path)
    assert main(["limits", "--json", "--path", str(path)]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["matmul_flops"] == {"float32": 2.5e10, "bfloat16": 5e10}
    assert "copy_points" not in record and "shape_points" not in record


def test_unknown_command_is_an_error(capsys):
    try:
        main(["limitz"])
    except SystemExit as e:
        assert e.code == 2
    assert "invalid choice" in capsys.readouterr().err
