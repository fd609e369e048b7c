"""Plausible wrong answers to lab 09 (see tests/labs/test_mutants.py): a commit that renames
before its manifest, one that fsyncs nothing, one that writes into the final directory, a
manifest of sizes only, a verify of sizes only; allclose, ``==`` and ``torch.equal`` for a
bit-exact check; Young without its factor 2, Daly without ``- δ`` or its ``δ ≥ 2M`` branch;
goodput without ``R``, with the whole interval lost, without the saves."""

from tools.grade import Mutant

Q1, Q2, Q3, Q4 = "atomic_commit / verify_checkpoint", "first_difference", "young_daly", "goodput"

_COMMIT = """
import json, os
from pathlib import Path
def atomic_commit(partial, final):
    partial, final = Path(partial), Path(final)
    files = sorted(p for p in partial.iterdir() if p.is_file() and p.name != "manifest.json")
    FSYNC
    manifest = {"files": {p.name: ENTRY for p in files}}
    BODY
    fsync_dir(final.parent)
    return final
"""
_FSYNC = """for p in files:
        with open(p, "rb+") as f:
            os.fsync(f.fileno())"""
_ENTRY = '{"sha256": sha256_of(p), "bytes": p.stat().st_size}'
_MANIFEST_THEN_RENAME = """with open(partial / "manifest.json", "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(partial, final)"""


def _commit(body: str = _MANIFEST_THEN_RENAME, fsync: str = _FSYNC, entry: str = _ENTRY) -> str:
    return _COMMIT.replace("FSYNC", fsync).replace("ENTRY", entry).replace("BODY", body)


_DIFF = """
import torch
def first_difference(a, b):
    for name in [*a, *(k for k in b if k not in a)]:
        if name not in a or name not in b:
            return name
        x, y = a[name], b[name]
        if SAME:
            continue
        return name
    return None
"""

MUTANTS = [
    Mutant(Q1, "renamed before the manifest was written", _commit(
        """os.rename(partial, final)
    with open(final / "manifest.json", "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())"""), expect="renamed before the manifest was complete"),
    Mutant(Q1, "no fsync of the shard files", _commit(fsync="pass"),
           expect=r"were not fsynced before the rename"),
    Mutant(Q1, "manifest written but not fsynced", _commit(
        """(partial / "manifest.json").write_text(json.dumps(manifest))
    os.rename(partial, final)"""), expect="manifest.json was not fsynced"),
    Mutant(Q1, "files copied under the final name, then the manifest (no rename)", _commit(
        """import shutil
    shutil.copytree(partial, final)
    with open(final / "manifest.json", "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(partial)"""), expect="never renamed"),
    Mutant(Q1, "manifest of sizes only", _commit(entry='{"bytes": p.stat().st_size}'),
           expect="no sha256"),
    Mutant(Q1, "verify compares sizes only", """
import json
from pathlib import Path
def verify_checkpoint(path):
    path = Path(path)
    if not (path / "manifest.json").is_file():
        raise ValueError("no manifest")
    for name, want in json.loads((path / "manifest.json").read_text())["files"].items():
        if not (path / name).is_file() or (path / name).stat().st_size != want["bytes"]:
            raise ValueError(name)
""", expect="one flipped bit and the same size"),
    Mutant(Q2, "torch.allclose", _DIFF.replace(
        "SAME", "x.shape == y.shape and x.dtype == y.dtype and torch.allclose(x, y)"),
        expect="one unit in the last place.*allclose"),
    Mutant(Q2, "== on values", _DIFF.replace(
        "SAME", "x.shape == y.shape and x.dtype == y.dtype and bool((x == y).all())"),
        expect="0.0 against -0.0"),
    Mutant(Q2, "torch.equal (dtype ignored, -0.0 == 0.0, NaN != NaN)", _DIFF.replace(
        "SAME", "torch.equal(x, y)"), expect="0.0 against -0.0"),
    Mutant(Q2, "bytes compared, dtype ignored", _DIFF.replace(
        "SAME", "x.shape == y.shape and torch.equal(x.contiguous().view(-1).view(torch.uint8), "
        "y.contiguous().view(-1).view(torch.uint8))"), expect="compare dtypes too"),
    Mutant(Q2, "names of b not in a ignored", """
import torch
def first_difference(a, b):
    for name in a:
        if name not in b:
            return name
        x, y = a[name], b[name]
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(
                x.contiguous().view(-1).view(torch.uint8), y.contiguous().view(-1).view(torch.uint8)):
            return name
    return None
""", expect="look at b's extra names"),
    Mutant(Q3, "Young without the factor 2", """
import math
def young_daly(save_s, mtbf_s):
    young = math.sqrt(save_s * mtbf_s)
    return young, young
""", expect="the factor 2 is missing"),
    Mutant(Q3, "Daly without - δ", """
import math
def young_daly(save_s, mtbf_s):
    young = math.sqrt(2 * save_s * mtbf_s)
    if save_s >= 2 * mtbf_s:
        return young, mtbf_s
    x = save_s / (2 * mtbf_s)
    return young, young * (1 + math.sqrt(x) / 3 + x / 9)
""", expect="ends with - δ"),
    Mutant(Q3, "Daly's interval is Young's", """
import math
def young_daly(save_s, mtbf_s):
    young = math.sqrt(2 * save_s * mtbf_s)
    return young, young
""", expect="daly equals young"),
    Mutant(Q3, "no δ ≥ 2M branch", """
import math
def young_daly(save_s, mtbf_s):
    young = math.sqrt(2 * save_s * mtbf_s)
    x = save_s / (2 * mtbf_s)
    return young, young * (1 + math.sqrt(x) / 3 + x / 9) - save_s
""", expect="beyond δ ≥ 2M"),
    Mutant(Q4, "goodput without the restart R", """
def goodput(tau_s, save_s, restart_s, mtbf_s):
    return max(0.0, 1.0 - save_s / tau_s - tau_s / 2 / mtbf_s)
""", expect="the restart R is missing"),
    Mutant(Q4, "the whole interval lost per failure (τ, not τ/2)", """
def goodput(tau_s, save_s, restart_s, mtbf_s):
    return max(0.0, 1.0 - save_s / tau_s - (tau_s + restart_s) / mtbf_s)
""", expect="strikes halfway"),
    Mutant(Q4, "the saves' share missing", """
def goodput(tau_s, save_s, restart_s, mtbf_s):
    return max(0.0, 1.0 - (tau_s / 2 + restart_s) / mtbf_s)
""", expect="the saves' share"),
    Mutant(Q4, "no clamp at 0", """
def goodput(tau_s, save_s, restart_s, mtbf_s):
    return 1.0 - save_s / tau_s - (tau_s / 2 + restart_s) / mtbf_s
""", expect="clamp at 0"),
]
