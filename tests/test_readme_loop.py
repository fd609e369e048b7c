"""The README's training loop is ``examples/library_loop.py``, and it runs as written.

The README shows one loop end to end (the monitor with a data phase, ZeRO stages 1-3 with
mixed precision, clipping, saving and resuming, the Prefetcher). So that it cannot rot, its
code block must be the example's text, character for character, and the example runs here
the way the README says: 2 gloo processes under real ``torchrun``, a few steps of each
stage, and a saved state resumed to the same weights as the run that never stopped.
"""

import math
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from perfkit.dist import end_process_tree

pytestmark = pytest.mark.distributed
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "library_loop.py"
SECTION = "## Train with perfkit: one loop, end to end"
LAUNCH_S = 300  # one 2-process run of a few steps: ~10 s idle, several times that under load


def readme_block(readme: str) -> str:
    """The first Python code block of the README's training-loop section."""
    assert SECTION in readme, f"the README has no section {SECTION!r}"
    body = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    found = re.search(r"^```python\n(.*?)^```$", body, re.S | re.M)
    assert found, f"the README's section {SECTION!r} has no ```python block"
    return found.group(1)


def torchrun(*args: object) -> str:
    """Run the example on 2 processes as the README does; its output (rank 0 prints)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--nnodes=1",
           "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0",  # a free port, whatever runs
           f"--rdzv-id={uuid.uuid4().hex}", "--max-restarts=0", str(EXAMPLE), *map(str, args)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=LAUNCH_S)
    except subprocess.TimeoutExpired:
        end_process_tree(proc.pid)  # torchrun's workers too: nothing is left behind
        out, _ = proc.communicate()
        raise AssertionError(f"the example ran past {LAUNCH_S} s: {out[-3000:]}") from None
    assert proc.returncode == 0, f"the example exited {proc.returncode}:\n{out[-3000:]}"
    return out


def summary(out: str, steps: int) -> dict:
    """What rank 0 printed at the end: the loss, the gradient norm, the phases' shares."""
    head = re.search(rf"^step {steps}: loss ([\d.]+), gradient norm ([\d.]+), ([\d.]+) ms a "
                     r"step \(p50\), ([\d,]+) tokens/s per rank$", out, re.M)
    assert head, f"no summary line for step {steps} in the output:\n{out[-3000:]}"
    shares = re.search(r"^  (data \d+%, forward \d+%, backward \d+%, optimizer \d+%, other \d+%)$",
                       out, re.M)
    assert shares, f"no line of phase shares (data first) in the output:\n{out[-3000:]}"
    return {"loss": float(head.group(1)), "norm": float(head.group(2)), "shares": shares.group(1)}


def test_the_readme_block_is_the_example():
    readme = (ROOT / "README.md").read_text()
    assert readme_block(readme) == EXAMPLE.read_text(), (
        "the README's training loop and examples/library_loop.py differ: change both (the "
        "README shows the file as it is)")
    # the section comes before the course's own material, right after the introduction
    assert readme.index(SECTION) < readme.index("## Working through the course")


def test_readme_block_parser_catches_a_drifted_copy():
    block = EXAMPLE.read_text()
    drifted = f"{SECTION}\n\ntext\n\n```python\n{block.replace('lr=1e-3', 'lr=2e-3', 1)}```\n"
    assert readme_block(drifted) != block  # one changed character is a difference
    assert readme_block(f"{SECTION}\n\n```python\n{block}```\n\n## Next\n") == block


@pytest.mark.parametrize("stage", [1, 2])
def test_stages_one_and_two_train_and_print_the_monitor(stage):
    got = summary(torchrun("--stage", stage, "--steps", 6), 6)
    # 6 AdamW steps from GPT-2's initialisation: the bytes' entropy at the start is ln 256
    assert got["loss"] < math.log(256) - 0.5, f"stage {stage} did not train: {got}"
    assert got["norm"] > 0, f"the gradient norm clip_grad_norm_ returned is {got['norm']}"


def test_stage_three_resumes_to_the_same_weights(tmp_path):
    whole, first, resumed = (tmp_path / n for n in ("whole.pt", "first.pt", "resumed.pt"))
    got = summary(torchrun("--stage", 3, "--steps", 6, "--save", whole), 6)
    assert got["loss"] < math.log(256) - 0.5, f"stage 3 did not train: {got}"
    torchrun("--stage", 3, "--steps", 3, "--save", first)
    summary(torchrun("--stage", 3, "--steps", 6, "--resume", first, "--save", resumed), 6)
    a, b = torch.load(whole), torch.load(resumed)
    assert a["step"] == b["step"] == 6
    assert a["model"].keys() == b["model"].keys() and all(
        t.numel() > 0 for t in a["model"].values()), "the saved model must hold whole tensors"
    # the same data, weights and AdamW moments: the resumed run is the run that never stopped
    for name, t in a["model"].items():
        assert torch.equal(t, b["model"][name]), f"{name} differs after resuming"
    for i, s in a["optimizer"]["state"].items():
        for k, v in s.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["optimizer"]["state"][i][k])), (
                f"optimizer state {i}/{k} differs after resuming")
