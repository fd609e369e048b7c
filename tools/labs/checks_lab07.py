"""Checks for lab 07 (model parallelism: Megatron's f and g, column- and row-parallel linears,
a 1F1B pipeline schedule).

Q1 and Q2 run first in the grading process on a one-process gloo group (a blank answer fails
with its own NotImplementedError, a miswired one in seconds), then in one torchrun launch on
2 processes (``tools.labs.tp_check``): float64 values and gradients against the unsplit
computation (to 1e-10), and which collectives ran in forward and in backward, each with the
group it was given. Q2 is graded with perfkit's f and g in place of the student's (the
names ``copy_to_tp`` / ``reduce_from_tp`` the classes call), so a mistake in Q1 does not
fail Q2 as well. Q3 is data: the schedule is checked with ``perfkit.parallel``'s validator
and simulator in this process (an order that would hang raises ``DeadlockError``; nothing
runs, so nothing can hang): complete, no deadlock, bubble ``(p - 1) / (m + p - 1)`` with
unit costs and with backward twice the forward, at most ``p - r`` micro-batches in flight on
rank ``r``, and ``ValueError`` for ``m < p``. Used by ``make grade`` and tests/labs/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tools.grade import launch_checked, pickled, require, time_limit
from tools.labs.record import record_library
from tools.labs.tp_check import HIDDEN, IN, OUT, one_process_group, run_linears, run_operators

# A correct answer's 2-process job takes about 5 s idle and 15-20 s under load (torch import
# included); an answer that waits in a collective the other rank never calls is only stopped
# by this limit, so it is a few times the loaded time.
LAUNCH_S = 60
HANG_HINT = ("a process waits in a collective the other never called. Does every rank run "
             "the same collectives in the same order (no `if rank == 0:` around an all_reduce)?")
OPS = ("copy_to_tp", "reduce_from_tp")
SIZES = ((1, 1), (1, 4), (2, 2), (2, 5), (3, 7), (4, 4), (4, 8), (5, 16))   # (p, m), m >= p


def _calls(calls: list) -> list[str]:
    return [name for name, _ in calls]


def _no_group(calls: list) -> list[str]:
    return [name for name, got in calls if not got]


def _where(rec: dict) -> str:
    return f"on {rec['world']} process{'es' if rec['world'] > 1 else ''}, rank {rec['rank']}:"


def _in_process(what: str, run, *args):
    """Run an answer on a one-process group under a short limit; its own errors become
    AssertionErrors that say so, a NotImplementedError stays one."""
    try:
        with time_limit(20, f"{what} on one process did not return within 20 s (a few small "
                        "matmuls): does it wait for something?"), one_process_group() as grp:
            return run(*args, grp)
    except (NotImplementedError, AssertionError):
        raise
    except Exception as e:
        raise AssertionError(f"{what} raised on a single process: {e!r}") from e


# --- Q1: the conjugate operators ----------------------------------------------------------


def _judge_operators(rec: dict) -> None:
    """Fail on the first mistake in one rank's record of :func:`run_operators`."""
    f, g, at = rec["f"], rec["g"], _where(rec)
    if (_calls(f["forward"]), _calls(f["backward"]), _calls(g["forward"]),
            _calls(g["backward"])) == (["all_reduce"], [], [], ["all_reduce"]):
        raise AssertionError(
            f"{at} the two operators are swapped: copy_to_tp all-reduced in forward and "
            "reduce_from_tp in backward. f (copy_to_tp) enters a column-parallel region: "
            "identity forward (x is already whole on every rank), all-reduce backward (each "
            "rank holds only its columns' share of dL/dx); g (reduce_from_tp) is the reverse")
    assert not f["forward"], (
        f"{at} copy_to_tp (f) ran {_calls(f['forward'])} in forward. f's forward is the "
        "identity: its input is already whole on every rank; only its backward all-reduces")
    assert not g["backward"], (
        f"{at} reduce_from_tp (g) ran {_calls(g['backward'])} in backward. g's backward is the "
        "identity: dL/dy is whole on every rank and each partial sum gets all of it; an "
        "all-reduce there multiplies the gradient by the number of ranks")
    for op, side, calls in (("copy_to_tp (f)", "backward", f["backward"]),
                            ("reduce_from_tp (g)", "forward", g["forward"])):
        assert _calls(calls) == ["all_reduce"], (
            f"{at} {op} ran {_calls(calls) or 'no collective'} in {side}; expected exactly one "
            "all_reduce. Call it through the module, dist.all_reduce(...), so that it can be "
            "recorded")
        assert not _no_group(calls), (
            f"{at} {op} called all_reduce without the group it was given: pass "
            "group=group (a tensor-parallel group is a subset of the ranks once TP is "
            "combined with data or pipeline parallelism)")
    assert f["value_ok"], f"{at} copy_to_tp(x) must return x unchanged (the identity)"
    assert not f["grad_averaged"], (
        f"{at} x.grad is the unsplit gradient divided by {rec['world']}: f's backward must "
        "SUM the ranks' shares (each holds its columns' part of dL/dx), not average them")
    assert not f["grad_local"], (
        f"{at} x.grad is only this rank's share of the gradient: f's backward must return "
        "the all-reduced gradient (dist.all_reduce works in place on the tensor it is given)")
    assert f["grad_ok"], (
        f"{at} x.grad differs from the unsplit gradient: f's backward must return the sum "
        "over ranks of the incoming gradient")
    assert not g["value_averaged"], (
        f"{at} reduce_from_tp returned the partial sums' mean: g must SUM them "
        "(ReduceOp.SUM, no division): each rank holds a partial product over its columns")
    assert g["value_ok"], (
        f"{at} reduce_from_tp(partial) differs from the unsplit product: g's forward must "
        "return the sum over ranks of the partial outputs")
    assert not g["grad_times_world"], (
        f"{at} the partial sums got {rec['world']} times the unsplit gradient: g's backward "
        "must pass the output gradient through unchanged")
    assert g["grad_ok"], (
        f"{at} the gradient of g's input differs from the unsplit one: g's backward is the "
        "identity")


def check_operators(ns: dict) -> None:
    f, g = require(ns, "copy_to_tp"), require(ns, "reduce_from_tp")
    with record_library("perfkit.parallel") as lib:
        rec = _in_process("copy_to_tp / reduce_from_tp", run_operators, f, g)
    assert not lib, (f"copy_to_tp / reduce_from_tp ran perfkit's own {sorted(lib)}: the lab "
                     "grades your operators; write the two autograd Functions yourself")
    _judge_operators(rec)
    with pickled(dict(zip(OPS, (f, g))), "operators.pkl") as path:
        res = launch_checked("tools.labs.tp_check", 2, {"question": "operators", "impl": path},
                             LAUNCH_S, "the operators", HANG_HINT, impl_name="copy_to_tp")
    for rec in res:
        _judge_operators(rec)


# --- Q2: column- and row-parallel linears --------------------------------------------------


@contextlib.contextmanager
def _library_operators(ns: dict) -> Iterator[None]:
    """perfkit's f and g under the student's names for the block (the answers' classes look
    them up in ``ns``, their module's globals, when they run or are pickled)."""
    from perfkit.parallel import tensor

    saved = {k: ns[k] for k in OPS if k in ns}
    ns.update({k: getattr(tensor, k) for k in OPS})
    try:
        yield
    finally:
        for k in OPS:
            ns.pop(k, None)
        ns.update(saved)


def _judge_linears(rec: dict) -> None:
    """Fail on the first mistake in one rank's record of :func:`run_linears`."""
    t, at = rec["world"], _where(rec)
    col, row, h = rec["col"], rec["row"], HIDDEN // rec["world"]
    assert col["weight"] != [HIDDEN, IN // t] or t == 1, (
        f"{at} ColumnParallelLinear's weight has shape {col['weight']}: the column split is "
        f"along the wrong dimension. It splits the OUTPUT features, the rows of "
        f"linear.weight ({HIDDEN}, {IN}) = (out_features, in_features): expected ({h}, {IN})")
    assert col["weight"] == [h, IN], (
        f"{at} ColumnParallelLinear's weight has shape {col['weight']}; this rank keeps "
        f"out_features / t = {h} rows of linear.weight ({HIDDEN}, {IN}): expected ({h}, {IN})")
    assert col["weight_ok"], (
        f"{at} ColumnParallelLinear's weight is not rows [{rec['rank'] * h}, "
        f"{(rec['rank'] + 1) * h}) of linear.weight: rank r keeps rows r*out/t to (r+1)*out/t")
    assert col["bias_ok"], (
        f"{at} ColumnParallelLinear's bias (shape {col['bias']}) must be this rank's slice of "
        f"linear.bias, the same rows as the weight: shape ({h},)")
    assert row["weight"] == [OUT, h], (
        f"{at} RowParallelLinear's weight has shape {row['weight']}: it splits the INPUT "
        f"features, the columns of linear.weight ({OUT}, {HIDDEN}): expected ({OUT}, {h})")
    assert row["weight_ok"], (
        f"{at} RowParallelLinear's weight is not columns [{rec['rank'] * h}, "
        f"{(rec['rank'] + 1) * h}) of linear.weight")
    assert row["bias_ok"], (
        f"{at} RowParallelLinear's bias (shape {row['bias']}) must be the whole linear.bias "
        f"({OUT},) on every rank: the output is not split, and the bias is added once, after "
        "the sum")
    for name, layer, want in (("ColumnParallelLinear", col, h * IN + h),
                              ("RowParallelLinear", row, OUT * h + OUT)):
        assert layer["numel"] == want, (
            f"{at} {name} registers {layer['numel']} parameter values; its slice has {want}. "
            "Keep only weight and bias as parameters (not the unsplit linear): each rank must "
            "hold 1/t of the layer")
    fwd, bwd = _calls(rec["forward"]), _calls(rec["backward"])
    assert fwd == ["all_reduce"], (
        f"{at} the MLP row(tanh(col(x))) ran {fwd or 'no collective'} in forward; expected "
        "exactly one all_reduce, g's in RowParallelLinear (the column-parallel layer's "
        "forward communicates nothing: f is the identity there)")
    assert bwd == ["all_reduce"], (
        f"{at} the MLP's backward ran {bwd or 'no collective'}; expected exactly one "
        "all_reduce, f's in ColumnParallelLinear: pass the input through copy_to_tp(x, group) "
        "before the matmul, and the output of the matmul through reduce_from_tp in the "
        "row-parallel layer")
    assert not _no_group(rec["forward"] + rec["backward"]), (
        f"{at} a collective ran without the group the layer was built with: pass "
        "self.group to copy_to_tp / reduce_from_tp")
    assert not rec["bias_counted_world"], (
        f"{at} the output is the unsplit MLP's plus {t - 1} extra bias: RowParallelLinear "
        f"added its bias on every rank BEFORE the all-reduce, so the sum counts it {t} times. "
        "Add the bias once, after reduce_from_tp")
    assert rec["y_ok"], (
        f"{at} row(tanh(col(x))) differs from the unsplit MLP: column output = F.linear(f(x), "
        "W_r, b_r); row output = g(F.linear(h_r, W_r)) + b")
    bad = [k for k, ok in rec["grads"].items() if not ok]
    assert not bad, (
        f"{at} the gradients of {bad} differ from the unsplit MLP's (the same slice of them). "
        "Are weight and bias nn.Parameters used directly in forward (not copies)?")
    for name, ok in rec["uneven_raises"].items():
        assert ok, (
            f"{at} {name} built from a linear whose split dimension has 7 features did not "
            f"raise ValueError: 7 does not divide over {t} ranks; refuse it with ValueError "
            "naming the features and the group's size (an uneven split would break the "
            "all-reduce, which needs the same shape on every rank)")


def check_linears(ns: dict) -> None:
    col, row = require(ns, "ColumnParallelLinear"), require(ns, "RowParallelLinear")
    with _library_operators(ns):
        with record_library("perfkit.parallel.tensor") as lib:
            rec = _in_process("ColumnParallelLinear / RowParallelLinear", run_linears, col, row)
        # f and g are perfkit's here; the layers themselves must be the student's
        own = {n for n in lib if n.rsplit(".", 1)[1] not in (*OPS, "forward", "backward")}
        assert not own, (f"the layers ran perfkit's own {sorted(own)}: the lab grades your "
                         "ColumnParallelLinear / RowParallelLinear; slice the weights yourself")
        _judge_linears(rec)
        with pickled({"ColumnParallelLinear": col, "RowParallelLinear": row},
                     "linears.pkl") as path:
            res = launch_checked("tools.labs.tp_check", 2, {"question": "linears", "impl": path},
                                 LAUNCH_S, "the linears", HANG_HINT,
                                 impl_name="ColumnParallelLinear")
    for rec in res:
        _judge_linears(rec)


# --- Q3: a 1F1B schedule --------------------------------------------------------------------

LIBRARY_BUILDERS = {"one_f_one_b", "gpipe", "interleaved_1f1b", "zb_h1", "make_schedule"}


def _check_one(fn, p: int, m: int) -> None:
    from perfkit.parallel import DeadlockError, Schedule, bubble_formula, simulate, validate

    with record_library("perfkit.parallel.schedules") as lib:
        sched = fn(p, m)
    used = {n.rsplit(".", 1)[1] for n in lib} & LIBRARY_BUILDERS
    assert not used, (f"schedule_1f1b ran perfkit's own {sorted(used)}: the lab grades your "
                      "order; build the Action lists yourself")
    assert isinstance(sched, Schedule), (
        f"schedule_1f1b({p}, {m}) returned {type(sched).__name__}; return a "
        "perfkit.parallel.Schedule")
    assert (sched.n_ranks, sched.n_stages, sched.n_micro) == (p, p, m), (
        f"schedule_1f1b({p}, {m}) made a Schedule with n_ranks={sched.n_ranks}, n_stages="
        f"{sched.n_stages}, n_micro={sched.n_micro}; expected {p}, {p}, {m} (one stage per rank)")
    try:
        validate(sched)
    except DeadlockError as e:
        raise AssertionError(
            f"p={p}, m={m}: the order would hang ({e}). A rank blocks on a backward whose "
            "gradient the next stage has not sent, while that stage waits for a forward "
            "this rank has not run: the warm-up must be LONGER on earlier ranks (p - r - 1 "
            "forwards on rank r), never on later ones") from None
    except ValueError as e:
        raise AssertionError(f"p={p}, m={m}: not a valid schedule: {e}. Every (stage, "
                             "micro-batch) needs one F and one B, on the rank of the stage, "
                             "F before B") from None
    peaks = simulate(sched, {"F": 1, "B": 1}).peak_in_flight
    if m > p and all(k == m for k in peaks):
        raise AssertionError(
            f"p={p}, m={m}: every rank holds all {m} micro-batches' activations at its peak: "
            "that is GPipe (all forwards, then all backwards), not 1F1B. After its warm-up a "
            "rank alternates one forward and one backward")
    assert max(peaks) <= p, (
        f"p={p}, m={m}: the ranks hold up to {list(peaks)} micro-batches' activations at "
        f"once; 1F1B holds at most p = {p}. Is the warm-up one forward too long (p - r - 1 "
        "forwards on rank r, then one forward and one backward in turn)?")
    over = [r for r, k in enumerate(peaks) if k > p - r]
    assert not over, (
        f"p={p}, m={m}: rank {over[0]} holds {peaks[over[0]]} micro-batches at once; 1F1B's "
        f"rank r holds at most p - r = {p - over[0]} (its warm-up of p - r - 1 forwards plus "
        "the one in flight)")
    want = bubble_formula("1f1b", p, m)
    for costs in ({"F": 1, "B": 1}, {"F": 1, "B": 2}):
        got = simulate(sched, costs).bubble_share
        assert abs(got - want) < 1e-9, (
            f"p={p}, m={m}, costs {costs}: the simulated bubble is {got:.4f} of the step; 1F1B's "
            f"is (p - 1) / (m + p - 1) = {want:.4f}. A warm-up shorter than p - r - 1 forwards "
            "leaves the later stages idle; compare your grid (simulate(...).text()) with "
            "the one in the notebook")


def check_schedule(ns: dict) -> None:
    fn = require(ns, "schedule_1f1b")
    with time_limit(20, "schedule_1f1b did not return within 20 s for p <= 5, m <= 16 "
                    "(a few hundred actions): does a loop never end?"):
        for p, m in SIZES:
            _check_one(fn, p, m)
        for p, m in ((4, 3), (2, 1), (0, 4), (3, 0)):
            try:
                fn(p, m)
            except ValueError:
                continue
            except Exception as e:  # noqa: BLE001 - any other error is the wrong one
                raise AssertionError(f"schedule_1f1b({p}, {m}) raised {e!r}; expected "
                                     "ValueError") from e
            raise AssertionError(
                f"schedule_1f1b(n_ranks={p}, n_micro={m}) must raise ValueError: 1F1B needs "
                "n_ranks >= 1 and n_micro >= n_ranks (with fewer micro-batches than stages "
                "the warm-up never fills the pipe)")


QUESTIONS = {"copy_to_tp / reduce_from_tp": check_operators,
             "ColumnParallelLinear / RowParallelLinear": check_linears,
             "schedule_1f1b": check_schedule}
TIMEOUT_S = {"copy_to_tp / reduce_from_tp": 90, "ColumnParallelLinear / RowParallelLinear": 90,
             "schedule_1f1b": 30}
