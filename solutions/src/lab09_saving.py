# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lab 09 · Saving a run: an atomic commit, a bit-exact resume check, how often to save
#
# Graded lab for module 14. You will write
#
# 1. `atomic_commit` and `verify_checkpoint`: the commit that makes a directory of shard files
#    a checkpoint (files, then a manifest with checksums, then one rename), and the check a
#    loader runs before it trusts one;
# 2. `first_difference`: the test that a resumed run is the same run, bit for bit;
# 3. `young_daly`: Young's and Daly's checkpoint intervals;
# 4. `goodput`: the share of the wall time a run keeps under failures.
#
# Replace each `raise NotImplementedError()` with your code, run the notebook, then grade it:
#
# ```
# make grade LAB=labs/lab09_saving.ipynb
# ```
#
# The grader commits directories of random files with your Q1, records what was on disk at
# the moment of the rename and which files were fsynced before it, **kills** a commit just
# before its rename (a forked child) and checks that nothing under the final name appeared,
# and flips one bit of a committed file. Q2 gets tensors that differ in one unit in the last
# place, in the sign of a zero, in dtype only, or in a missing name. Q3 and Q4 are held
# against Daly's published cases and `perfkit.saving.interval`. Do not rename the functions
# or change their arguments.

# %% tags=["parameters"]
import os

QUICK = os.environ.get("PERFKIT_QUICK", "0") in ("1", "true")  # CI sets it

# %%
import hashlib
import json
import math
import tempfile
from pathlib import Path

import torch

from perfkit.saving import interval

# %% [markdown]
# Two helpers you may use: the sha256 of a file (read in chunks, so a large shard never sits
# in memory whole), and an fsync of a directory (a rename or a new file is durable only once
# its directory is fsynced).

# %%
def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (new files, renames) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

# %% [markdown]
# ## Q1 · `atomic_commit(partial, final)` and `verify_checkpoint(path)`
#
# Every rank has written its shard files into the directory `partial` (e.g.
# `step_000000120.partial`). A checkpoint counts only once every file **and** a manifest are
# complete, so that a kill at any moment leaves either the previous checkpoint or the new
# one, never half of one. Write the commit in this order:
#
# 1. fsync every file of `partial` (the data must be on storage before anything names it);
# 2. write `partial / "manifest.json"`: `{"files": {name: {"sha256": hex, "bytes": size}}}`
#    for every file but the manifest, and fsync it;
# 3. **one** `os.rename(partial, final)`, then fsync `final`'s parent directory;
# 4. return `final`.
#
# `verify_checkpoint(path)` reads `path / "manifest.json"` and raises `ValueError` whose
# message names the first file that is missing, of another size, or whose sha256 differs (a
# flipped bit keeps the size); a directory without a manifest raises `ValueError` too. It
# returns `None` when everything matches.

# %%
def atomic_commit(partial: Path, final: Path) -> Path:
    ### BEGIN SOLUTION
    partial, final = Path(partial), Path(final)
    files = sorted(p for p in partial.iterdir() if p.is_file() and p.name != "manifest.json")
    for p in files:
        with open(p, "rb+") as f:
            os.fsync(f.fileno())
    manifest = {"files": {p.name: {"sha256": sha256_of(p), "bytes": p.stat().st_size} for p in files}}
    with open(partial / "manifest.json", "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(partial, final)
    fsync_dir(final.parent)
    return final
    ### END SOLUTION


def verify_checkpoint(path: Path) -> None:
    ### BEGIN SOLUTION
    path = Path(path)
    mf = path / "manifest.json"
    if not mf.is_file():
        raise ValueError(f"{path.name}: no manifest.json: not a complete checkpoint")
    for name, want in json.loads(mf.read_text())["files"].items():
        p = path / name
        if not p.is_file():
            raise ValueError(f"{name}: missing")
        if p.stat().st_size != want["bytes"]:
            raise ValueError(f"{name}: {p.stat().st_size} bytes, the manifest says {want['bytes']}")
        if sha256_of(p) != want["sha256"]:
            raise ValueError(f"{name}: sha256 differs from the manifest (corrupt)")
    ### END SOLUTION

# %%
demo = Path(tempfile.mkdtemp())
(demo / "step_1.partial").mkdir()
for r in range(2):
    (demo / "step_1.partial" / f"__{r}_0.distcp").write_bytes(os.urandom(1000))
done = atomic_commit(demo / "step_1.partial", demo / "step_1")
print(sorted(p.name for p in done.iterdir()))
verify_checkpoint(done)
print("verified")

# %% [markdown]
# ## Q2 · `first_difference(a, b) -> str | None`
#
# A resumed run is the same run only if every tensor is the same **bit for bit**: the same
# dtype, the same shape, the same bytes. `torch.allclose` is not that test (it forgives a
# last-place difference, which is exactly what a wrong reduction order or a lost RNG state
# leaves), and neither is `torch.equal` (it holds `0.0` equal to `-0.0` and `nan` unequal to
# itself).
#
# `a` and `b` map names to tensors. Return the first name, in `a`'s order and then `b`'s
# extra names, whose tensors differ in dtype, shape or any bit, or that only one of them has;
# `None` if none does. Hint: compare the bytes, `t.contiguous().view(-1).view(torch.uint8)`.

# %%
def first_difference(a: dict, b: dict) -> str | None:
    ### BEGIN SOLUTION
    for name in [*a, *(k for k in b if k not in a)]:
        if name not in a or name not in b:
            return name
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape:
            return name
        if not torch.equal(x.contiguous().view(-1).view(torch.uint8), y.contiguous().view(-1).view(torch.uint8)):
            return name
    return None
    ### END SOLUTION

# %%
w = torch.randn(4, 4, dtype=torch.float64)
print(first_difference({"w": w, "b": torch.zeros(4)}, {"w": w.clone(), "b": torch.zeros(4)}))
print(first_difference({"w": w}, {"w": torch.nextafter(w, w + 1)}))

# %% [markdown]
# ## Q3 · `young_daly(save_s, mtbf_s) -> (young_s, daly_s)`
#
# A run that spends `δ` (`save_s`) per save and fails on average every `M` (`mtbf_s`)
# seconds should save every
#
# * Young (1974): `τ = √(2 δ M)`;
# * Daly (2006): `τ = √(2 δ M) [1 + ⅓ √(δ / (2M)) + (1/9) δ / (2M)] - δ` for `δ < 2M`, and
#   `τ = M` for `δ ≥ 2M`.
#
# Return both, in seconds.

# %%
def young_daly(save_s: float, mtbf_s: float) -> tuple[float, float]:
    ### BEGIN SOLUTION
    young = math.sqrt(2 * save_s * mtbf_s)
    if save_s >= 2 * mtbf_s:
        return young, mtbf_s
    x = save_s / (2 * mtbf_s)
    return young, young * (1 + math.sqrt(x) / 3 + x / 9) - save_s
    ### END SOLUTION

# %%
print([round(t / 60, 1) for t in young_daly(5 * 60, 24 * 3600)])   # Daly's case: 117 min

# %% [markdown]
# ## Q4 · `goodput(tau_s, save_s, restart_s, mtbf_s) -> float`
#
# The share of the wall time spent on training that survives: saves cost `δ/τ`, each
# failure costs the restart `R` and on average half an interval of lost work, `τ/2`:
#
# `goodput = 1 - δ/τ - (τ/2 + R)/M`, and `0.0` where the losses exceed the whole time.

# %%
def goodput(tau_s: float, save_s: float, restart_s: float, mtbf_s: float) -> float:
    ### BEGIN SOLUTION
    return max(0.0, 1.0 - save_s / tau_s - (tau_s / 2 + restart_s) / mtbf_s)
    ### END SOLUTION

# %%
tau = young_daly(20.0, 3 * 3600.0)[1]
print(f"{goodput(tau, 20.0, 600.0, 3 * 3600.0):.4f}", f"{interval.goodput(tau, 20.0, 600.0, 3 * 3600.0):.4f}")
