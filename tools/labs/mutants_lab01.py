"""Plausible wrong answers to lab 01 (see tests/labs/test_mutants.py)."""

from tools.grade import Mutant

_TIMER = """
import contextlib, time
class PhaseTimer:
    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.phase_s = {}
        self.step_s = 0.0
        self._step_start = None

    @contextlib.contextmanager
    def phase(self, name):
        start = self.clock()
        if self._step_start is None:
            self._step_start = start
        PHASE_BODY

    def step(self):
        now = self.clock()
        if self._step_start is not None:
            self.step_s += now - self._step_start
        STEP_END

    def shares(self):
        if self.step_s <= 0:
            raise RuntimeError("no step")
        out = {k: v / self.step_s for k, v in self.phase_s.items()}
        out["other"] = max(0.0, 1.0 - sum(out.values()))
        return out
"""
_SUM = """try:
            yield
        finally:
            self.phase_s[name] = self.phase_s.get(name, 0.0) + self.clock() - start"""

MUTANTS = [
    Mutant("q1_phase_timer", "a phase run twice in a step overwrites instead of adding",
           _TIMER.replace("PHASE_BODY", """try:
            yield
        finally:
            self.phase_s[name] = self.clock() - start""").replace("STEP_END", "self._step_start = now"),
           expect="summed"),
    Mutant("q1_phase_timer", "no try/finally: a phase that raises is lost",
           _TIMER.replace("PHASE_BODY", """yield
        self.phase_s[name] = self.phase_s.get(name, 0.0) + self.clock() - start""")
           .replace("STEP_END", "self._step_start = now"), expect="try/finally"),
    Mutant("q1_phase_timer", "the next step starts at its first phase, not at step()",
           _TIMER.replace("PHASE_BODY", _SUM).replace("STEP_END", "self._step_start = None"),
           expect="start the next step at the moment it is called"),
    Mutant("q1_phase_timer", "shares() before any step returns zeros instead of raising",
           _TIMER.replace("PHASE_BODY", _SUM).replace("STEP_END", "self._step_start = now")
           .replace('raise RuntimeError("no step")', "return {}"), expect="must raise RuntimeError"),
    Mutant("q2_find_bottlenecks", "ordered by share instead of share / threshold", """
def find_bottlenecks(shares, thresholds):
    over = [k for k, limit in thresholds.items() if shares.get(k, 0.0) > limit]
    return sorted(over, key=lambda k: shares[k], reverse=True)
""", expect="ordered by share / threshold"),
    Mutant("q2_find_bottlenecks", "at or above the threshold instead of strictly above", """
def find_bottlenecks(shares, thresholds):
    over = [k for k, limit in thresholds.items() if shares.get(k, 0.0) >= limit]
    return sorted(over, key=lambda k: shares[k] / thresholds[k], reverse=True)
""", expect="strictly above"),
    Mutant("q2_find_bottlenecks", "every phase with a share above 10 %, whatever its threshold", """
def find_bottlenecks(shares, thresholds):
    over = [k for k, v in shares.items() if v > 0.10 and k in thresholds]
    return sorted(over, key=lambda k: shares[k] / thresholds[k], reverse=True)
""", expect="strictly above their threshold"),
    Mutant("q3_amdahl_speedup", "the whole step divided by the factor", """
def amdahl_speedup(shares, phase, factor):
    if phase not in shares or not factor > 0:
        raise ValueError("bad")
    return factor
""", expect=r"1 / \(1 - s \+ s / factor\)"),
    Mutant("q3_amdahl_speedup", "the share multiplied instead of divided", """
def amdahl_speedup(shares, phase, factor):
    if phase not in shares or not factor > 0:
        raise ValueError("bad")
    s = shares[phase]
    return 1.0 / (1.0 - s + s * factor)
""", expect=r"1 / \(1 - s \+ s / factor\)"),
    Mutant("q3_amdahl_speedup", "no error for a factor <= 0", """
def amdahl_speedup(shares, phase, factor):
    if phase not in shares:
        raise ValueError("bad")
    s = shares[phase]
    return 1.0 / (1.0 - s + s / factor)
""", expect="must raise ValueError"),
]
