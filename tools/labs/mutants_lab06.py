"""Plausible wrong answers to lab 06 (see tests/labs/test_mutants.py).

The job mutants share one baseline (the slow and reference runs are measured once per
grading process, or once per test session: tests/labs/conftest.py); a wrong job caught
before the baseline runs (weights that differ across ranks, no result) costs one run.
"""

from tools.grade import Mutant

MUTANTS = [
    Mutant("q1_amdahl_bound", "the bound for removing the part, whatever the factor", """
def amdahl_bound(share, factor=math.inf):
    if not 0.0 <= share <= 1.0 or not factor > 0:
        raise ValueError("share must be in [0, 1] and factor > 0")
    return 1.0 / (1.0 - share)
""", expect="removing the part entirely"),
    Mutant("q1_amdahl_bound", "linear in the factor (Gustafson)", """
def amdahl_bound(share, factor=math.inf):
    if not 0.0 <= share <= 1.0 or not factor > 0:
        raise ValueError("share must be in [0, 1] and factor > 0")
    return 1.0 + share * (factor - 1.0)
""", expect="Gustafson"),
    Mutant("q1_amdahl_bound", "the part's time divided where it should be added", """
def amdahl_bound(share, factor=math.inf):
    if not 0.0 <= share <= 1.0 or not factor > 0:
        raise ValueError("share must be in [0, 1] and factor > 0")
    return 1.0 / (1.0 - share / factor)
""", expect="new step time is"),
    Mutant("q1_amdahl_bound", "no check of the arguments", """
def amdahl_bound(share, factor=math.inf):
    return 1.0 / ((1.0 - share) + share / factor)
""", expect="raising ValueError"),
    Mutant("q2_time_to_target", "one step's loss instead of the window's mean", """
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    for i, loss in enumerate(losses):
        if loss <= target:
            return ends[i]
    return None
""", expect="single step's loss is noisy"),
    Mutant("q2_time_to_target", "a partial window counted at the start", """
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    k = math.ceil(window_tokens / tokens_per_step)
    for i in range(len(losses)):
        w = losses[max(0, i - k + 1):i + 1]
        if sum(w) / len(w) <= target:
            return ends[i]
    return None
""", expect="window must be full"),
    Mutant("q2_time_to_target", "the number of steps instead of the seconds", """
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    k = math.ceil(window_tokens / tokens_per_step)
    for i in range(k - 1, len(losses)):
        if sum(losses[i - k + 1:i + 1]) / k <= target:
            return i + 1
    return None
""", expect="not the number of steps"),
    Mutant("q2_time_to_target", "strictly below the target", """
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    k = math.ceil(window_tokens / tokens_per_step)
    for i in range(k - 1, len(losses)):
        if sum(losses[i - k + 1:i + 1]) / k < target:
            return ends[i]
    return None
""", expect=r"<=, not <"),
    Mutant("q2_time_to_target", "the window in steps, not tokens", """
def time_to_target(ends, losses, tokens_per_step, target, window_tokens):
    k = window_tokens
    for i in range(k - 1, len(losses)):
        if sum(losses[i - k + 1:i + 1]) / k <= target:
            return ends[i]
    return None
""", expect="not window_tokens steps"),
    Mutant("q3_fast_job", "DDP removed to save the all-reduce: every rank trains alone", """
def fast_main(argv=None):
    import torch
    import torch.nn.parallel as par

    class Alone(torch.nn.Module):  # DDP's interface, without averaging the gradients
        def __init__(self, module, **kw):
            super().__init__()
            self.module, self.bucket_bytes_cap, self.find_unused_parameters = module, 0, False

        def forward(self, *a, **k):
            return self.module(*a, **k)

    par.DistributedDataParallel = Alone
    return job.main([*(argv or []), "--fix", "data,sync,optimizer,attention,batch"])
""", expect="weights differ"),
    Mutant("q3_fast_job", "the result printed, never handed back to the launcher", """
def fast_main(argv=None):
    from perfkit import dist as d

    d.worker_result = lambda value: print(value)
    return job.main([*(argv or []), "--fix", "all"])
""", expect="handed back no job result"),
    Mutant("q3_fast_job", "every fix but the top finding (the data pipeline)", """
def fast_main(argv=None):
    return job.main([*(argv or []), "--fix", "sync,ddp,optimizer,attention,batch"])
""", expect=r"bar is .*perfkit diagnose on your job: \[\w+\] data"),
    Mutant("q3_fast_job", "data-parallel in the first run (the one checked before), every rank "
           "alone in the runs after", """
def fast_main(argv=None):
    import os
    import sys
    from pathlib import Path

    import torch
    import torch.nn.parallel as par

    # every run gets the same pickle: a file beside it, one per rank, tells a later run
    # from the first (job.main ends the process: the file is written before it starts)
    pkl = Path(next(a for a in sys.orig_argv if a.endswith(".pkl")))
    ran = pkl.with_suffix(f".ran{os.environ['RANK']}")
    later = ran.exists()
    ran.touch()
    if later:
        class Alone(torch.nn.Module):  # DDP's interface, without averaging the gradients
            def __init__(self, module, **kw):
                super().__init__()
                self.module, self.bucket_bytes_cap, self.find_unused_parameters = module, 0, False

            def forward(self, *a, **k):
                return self.module(*a, **k)

        par.DistributedDataParallel = Alone
    return job.main([*(argv or []), "--fix", "all"])
""", expect=r"weights differ in your run [2-9]"),
]
