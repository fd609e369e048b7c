"""Plausible wrong answers to lab 04 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_STEP = """
import torch
def fast_train_step(model, optimizer, x, y):
    BODY
"""

MUTANTS = [
    Mutant("q1_train_flops", "no attention term", """
def train_flops(n_params, n_layer, d_model, seq_len, batch):
    return 6 * n_params * batch * seq_len
""", expect="attention term .* is missing"),
    Mutant("q1_train_flops", "the forward pass only", """
def train_flops(n_params, n_layer, d_model, seq_len, batch):
    tokens = batch * seq_len
    return 2 * n_params * tokens + 4 * n_layer * d_model * seq_len * tokens
""", expect="forward only"),
    Mutant("q1_train_flops", "tokens counted as the batch", """
def train_flops(n_params, n_layer, d_model, seq_len, batch):
    return 6 * n_params * batch + 12 * n_layer * d_model * seq_len * batch
""", expect=r"batch \* seq_len, not batch"),
    Mutant("q2_causal_attention", "no causal mask", """
import torch.nn.functional as F
def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)
""", expect="is it causal"),
    Mutant("q2_causal_attention", "the upper triangle kept instead of the lower", """
import math, torch
def causal_attention(q, k, v):
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).triu(), float("-inf"))
    return att.softmax(-1) @ v
""", expect="is it causal"),
    Mutant("q2_causal_attention", "correct but materialises the T x T matrix", """
import math, torch
def causal_attention(q, k, v):
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    return att.softmax(-1) @ v
""", expect="score matrix"),
    Mutant("q2_causal_attention", "no 1/sqrt(d) scaling", """
import torch.nn.functional as F
def causal_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0)
""", expect="scaled by 1/sqrt"),
    Mutant("q3_same_training", "the optimizer never steps", _STEP.replace("BODY", """loss = model(x, y)
    loss.backward()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()"""), expect="largest gap"),
    Mutant("q3_same_training", "gradients never zeroed (they accumulate)", _STEP.replace("BODY", """loss = model(x, y)
    loss.backward()
    optimizer.step()
    return loss.detach()"""), expect="largest gap"),
    Mutant("q3_same_training", "the model's weights cast to bf16", _STEP.replace("BODY", """model.to(torch.bfloat16) if next(model.parameters()).dtype != torch.bfloat16 else None
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()"""), expect="keep the weights and the optimizer in fp32"),
    Mutant("q4_speedup", "the slow step unchanged", """
import torch
class FastGPT(SlowGPT):
    pass
def fast_train_step(model, optimizer, x, y):
    return slow_train_step(model, optimizer, x, y)
""", expect="kernels|stores T x T|reference solution reaches"),
    Mutant("q4_speedup", "only the GELU fused", """
import torch, torch.nn.functional as F
class FastGPT(SlowGPT):
    def mlp_activation(self, x):
        return F.gelu(x, approximate="tanh")
def fast_train_step(model, optimizer, x, y):
    return slow_train_step(model, optimizer, x, y)
""", expect="stores T x T"),
    Mutant("q4_speedup", "attention still one head at a time, bf16 everywhere", """
import torch, torch.nn.functional as F
class FastGPT(SlowGPT):
    def mlp_activation(self, x):
        return F.gelu(x, approximate="tanh")
def fast_train_step(model, optimizer, x, y):
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
""", expect="stores T x T"),
    Mutant("q4_speedup", "fused attention, but the nine-kernel GELU kept", """
import torch, torch.nn.functional as F
class FastGPT(SlowGPT):
    def attention(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
def fast_train_step(model, optimizer, x, y):
    return slow_train_step(model, optimizer, x, y)
""", expect="kernels"),
    Mutant("q4_speedup", "trains for the steps the loss check compares, then times forward "
           "passes only", """
import torch, torch.nn.functional as F
class FastGPT(SlowGPT):
    def attention(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    def mlp_activation(self, x):
        return F.gelu(x, approximate="tanh")
def fast_train_step(model, optimizer, x, y):
    model.calls = getattr(model, "calls", 0) + 1
    if model.calls > 4:  # q3 compares 4 steps of a fresh model: the rest are only timed
        with torch.no_grad():
            return model(x, y)
    loss = model(x, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()
""", expect="timed steps did not train as the slow step does"),
]
