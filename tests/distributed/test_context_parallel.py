"""Ring attention (perfkit.parallel.context) on 2, 3 and 4 real torchrun processes: output
and the three gradients equal float64 attention over the whole sequence (non-causal,
causal contiguous, causal zig-zag; float64 and float32), the bytes each rank sends equal the
count, and every transfer is inside a timed ring. One launch per process count."""

import json

import pytest

from perfkit import dist
from perfkit.parallel.context_model import ring_bytes

pytestmark = pytest.mark.distributed

TOL = {"float64": 1e-12, "float32": 1e-5}  # fp32: rounding of D=8 dot products only


def _launch(nproc, cfg):
    return dist.launch("perfkit.jobs.context_parallel", nproc, ["--config", json.dumps(cfg)],
                       timeout_s=240)


@pytest.mark.parametrize("nproc", [2, 3, 4])
def test_ring_attention_equals_one_process(nproc):
    # 2P chunks of 7 rows with tile 4: no length is a multiple of the tile
    cfg = {"equal": {"seq_len": 2 * nproc * 7, "tile": 4}}
    if nproc == 2:
        cfg["time"] = {"seq_len": 64, "tile": 16, "repeat": 2}
    res = _launch(nproc, cfg)
    assert [r["rank"] for r in res] == list(range(nproc))
    for r in res:
        cases = {(e["case"], e["dtype"]) for e in r["equal"]}
        assert cases == {(c, d) for c in ("full", "causal", "zigzag") for d in TOL}
        for e in r["equal"]:
            where = f"rank {r['rank']} of {nproc}, {e['case']} {e['dtype']}"
            assert e["finite"], f"{where}: NaN or inf"
            for key in ("out_err", "dq_err", "dk_err", "dv_err"):
                assert e[key] <= TOL[e["dtype"]], f"{where}: {key} {e[key]:.2e}"
            # forward: P-1 K/V blocks; backward: P-1 again plus P dK/dV accumulators
            assert e["stats"]["sent_forward"] == e["want_bytes"]["forward"], where
            assert e["stats"]["sent_backward"] == e["want_bytes"]["backward"], where
            assert e["stats"]["steps"] == 2 * nproc, where
    want = ring_bytes(2, 2, 2 * nproc * 7, 8, nproc)
    assert want.forward == (nproc - 1) * 2 * 2 * 2 * 14 * 8 * 4  # (P-1)/P of K and V, fp32
    if nproc == 2:
        for r in res:
            t = r["time"]
            assert len(t["exchange_s"]) == 2 and min(t["exchange_s"]) > 0
            assert len(t["pair_exchange_s"]) == 2 and min(t["pair_exchange_s"]) > 0
            for split in ("contiguous", "zigzag"):
                rec = t["splits"][split]
                assert all(len(rec[k]) == 2 for k in ("compute_s", "wait_s", "ready_wait_s", "step_s"))
                for c, w, s in zip(rec["compute_s"], rec["wait_s"], rec["step_s"]):
                    assert 0 < c < s and 0 <= w < s  # compute and waits lie inside the step
                # the part after both neighbours had sent is a part of the waits
                for w, ready in zip(rec["wait_s"], rec["ready_wait_s"]):
                    assert 0 <= ready <= w + 1e-4


def test_a_missing_peer_fails_after_the_timeout_instead_of_hanging():
    # rank 1 never joins the ring; rank 0's transfer must give up after timeout_s = 2
    with pytest.raises(dist.WorkerError) as err:
        _launch(2, {"missing_peer": {"timeout_s": 2, "sleep_s": 120}})
    assert err.value.rank == 0 and "Timed out" in err.value.worker_traceback
