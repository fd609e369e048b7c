"""Plausible wrong answers to lab 08 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_UPDATE = """
import math, torch
def online_softmax_update(m, total, o, s, v):
    BODY
"""
_MERGE = """
import math, torch
def merge_partials(o_a, lse_a, o_b, lse_b):
    BODY
"""
_TILED = """
import math, torch
def tiled_causal_attention(q, k, v, tile):
    t, d = q.shape
    out = torch.empty_like(q)
    for i0 in range(0, t, tile):
        i1 = min(i0 + tile, t)
        m = torch.full((i1 - i0,), -math.inf, dtype=q.dtype)
        total, o = torch.zeros(i1 - i0, dtype=q.dtype), torch.zeros(i1 - i0, d, dtype=q.dtype)
        for j0 in range(0, KEYS, tile):
            j1 = min(j0 + tile, t)
            s = q[i0:i1] @ k[j0:j1].T SCALE
            later = torch.arange(j0, j1)[None, :] MASK torch.arange(i0, i1)[:, None]
            s = s.masked_fill(later, -math.inf)
            m, total, o = online_softmax_update(m, total, o, s, v[j0:j1])
        out[i0:i1] = o / total[:, None]
    return out
"""


def _tiled(keys: str = "i1", scale: str = "/ math.sqrt(d)", mask: str = ">") -> str:
    return _TILED.replace("KEYS", keys).replace("SCALE", scale).replace("MASK", mask)


MUTANTS = [
    Mutant("q1_online_softmax_update", "the stale max not rescaled", _UPDATE.replace("BODY", """
    m_new = torch.maximum(m, s.amax(-1))
    shift = torch.where(m_new == -math.inf, 0.0, m_new)
    p = torch.exp(s - shift[:, None])
    return m_new, total + p.sum(-1), o + p @ v"""), expect="stale max"),
    Mutant("q1_online_softmax_update", "total rescaled but not o", _UPDATE.replace("BODY", """
    m_new = torch.maximum(m, s.amax(-1))
    shift = torch.where(m_new == -math.inf, 0.0, m_new)
    p = torch.exp(s - shift[:, None])
    alpha = torch.exp(m - shift)
    return m_new, alpha * total + p.sum(-1), o + p @ v"""), expect="o .* must be rescaled"),
    Mutant("q1_online_softmax_update", "no guard for rows that saw only -inf",
           _UPDATE.replace("BODY", """
    m_new = torch.maximum(m, s.amax(-1))
    p = torch.exp(s - m_new[:, None])
    alpha = torch.exp(m - m_new)
    return m_new, alpha * total + p.sum(-1), alpha[:, None] * o + p @ v"""), expect="NaN"),
    Mutant("q1_online_softmax_update", "no maximum at all (plain exp sums)",
           _UPDATE.replace("BODY", """
    return m, total + torch.exp(s).sum(-1), o + torch.exp(s) @ v"""), expect="overflow"),
    Mutant("q2_merge_partials", "the merge without the max shift (overflow on large logits)",
           _MERGE.replace("BODY", """
    lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
    w_a = torch.where(lse_a == -math.inf, 0.0, torch.exp(lse_a - lse))
    w_b = torch.where(lse_b == -math.inf, 0.0, torch.exp(lse_b - lse))
    return w_a[:, None] * o_a + w_b[:, None] * o_b, lse"""), expect="overflow"),
    Mutant("q2_merge_partials", "outputs averaged instead of weighted", _MERGE.replace("BODY", """
    m = torch.maximum(lse_a, lse_b)
    shift = torch.where(m == -math.inf, 0.0, m)
    lse = shift + torch.log(torch.exp(lse_a - shift) + torch.exp(lse_b - shift))
    return (o_a + o_b) / 2, lse"""), expect="weighted by its share"),
    Mutant("q2_merge_partials", "the larger side's lse kept (max instead of log-sum-exp)",
           _MERGE.replace("BODY", """
    lse = torch.maximum(lse_a, lse_b)
    w_a = torch.where(lse_a == -math.inf, 0.0, torch.exp(lse_a - lse))
    w_b = torch.where(lse_b == -math.inf, 0.0, torch.exp(lse_b - lse))
    return (w_a[:, None] * o_a + w_b[:, None] * o_b) / (w_a + w_b)[:, None], lse"""),
           expect="counts each side's keys once"),
    Mutant("q2_merge_partials", "shifted by the max even when both sides are -inf",
           _MERGE.replace("BODY", """
    m = torch.maximum(lse_a, lse_b)
    lse = m + torch.log(torch.exp(lse_a - m) + torch.exp(lse_b - m))
    return torch.exp(lse_a - lse)[:, None] * o_a + torch.exp(lse_b - lse)[:, None] * o_b, lse"""),
           expect="NaN|unchanged"),
    Mutant("q3_tiled_causal_attention", "causal tiles not skipped (every key tile, masked)",
           _tiled(keys="t"), expect="tiles above the diagonal were computed"),
    Mutant("q3_tiled_causal_attention", "the mask off by one (a query does not see itself)",
           _tiled(mask=">="), expect="off by one"),
    Mutant("q3_tiled_causal_attention", "scores not scaled by 1/sqrt(D)", _tiled(scale=""),
           expect="1/sqrt"),
    Mutant("q3_tiled_causal_attention", "the diagonal tile skipped", _tiled(keys="i0"),
           expect="straddles the diagonal"),
]
