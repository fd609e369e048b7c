"""NCCL through perfkit.dist on a CUDA machine: one rank, one GPU (``gpu`` mark).

A one-GPU machine can run NCCL only with one rank per GPU: here a single-rank job joins the
group through :func:`perfkit.dist.init_worker`, binds ``cuda:0`` and all-reduces on it.
(Two ranks on one GPU need gloo: tools/gpu_run.py sets ``PERFKIT_BACKEND=gloo`` on a machine
with fewer than two GPUs.)
"""

import textwrap

import pytest

from perfkit import dist

WORKER = textwrap.dedent("""
    import torch
    import torch.distributed as tdist

    from perfkit import dist as pdist

    ctx = pdist.init_worker()
    t = torch.full((1 << 20,), float(ctx.rank + 1), device=ctx.device)  # 4 MiB fp32
    tdist.all_reduce(t)
    torch.cuda.synchronize()
    pdist.worker_result({"backend": ctx.backend, "device": str(ctx.device),
                         "tensor_device": str(t.device), "sum": t[0].item(),
                         "world": ctx.world_size})
    pdist.shutdown()
""")


@pytest.mark.gpu
@pytest.mark.distributed
def test_single_rank_nccl_all_reduce(tmp_path):
    script = tmp_path / "nccl_worker.py"
    script.write_text(WORKER)
    (res,) = dist.launch(str(script), 1, backend="nccl", timeout_s=180)
    assert res == {"backend": "nccl", "device": "cuda:0", "tensor_device": "cuda:0", "sum": 1.0,
                   "world": 1}
