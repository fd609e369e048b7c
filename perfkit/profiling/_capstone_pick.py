"""Which fix the capstone's loop (module 08) plays next, and the bound it predicts.

:func:`rank_picks` builds a :class:`~perfkit.profiling.capstone_text.Pick` for every fix that
answers a finding above information level and is not used yet, and takes the one whose bound is
largest: the gain the fix can remove, not the share of the finding that named it. The two differ
where a finding's share holds time its fix does not remove: on a CPU the sync finding's share holds
DDP's waits for its bucket all-reduces (communication: Holistic Trace Analysis, HTA, counts a
collective kernel's whole time, its wait included, as communication; the diagnosis books it as sync
only because it falls between two host reads), which the fix of the reads
does not remove and the DDP fix does. Once no such fix is left, the compute fixes follow, in their
listed order. :func:`~perfkit.profiling.capstone.next_fix` checks the arguments and calls it.

Usage::

    pick = rank_picks(report, result, job, usable, fix_for_finding, peak)
    print(pick.fix, pick.bound)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from perfkit.profiling.capstone_text import (
    SHARE_CAP,
    TOO_TIGHT,
    Pick,
    bound_class,
    loose_bound,
    percent2,
    profiled_mean_ms,
    reads_pick,
    scaled_share,
    unprofiled_factor,
)

__all__ = ["rank_picks", "waste_pick"]


def waste_pick(f: Mapping, fix: str, report: Mapping, slowdown: float,
               fix_for_finding: Mapping[str, Sequence[str]]) -> Pick:
    """The bound of ``fix`` for the finding ``f`` of ``report`` (``slowdown``: the profiled over the
    unprofiled step), by the rules :func:`~perfkit.profiling.capstone.next_fix` states."""
    step = profiled_mean_ms(report)  # ms: the step the shares are of
    slow, said = unprofiled_factor(slowdown, step)  # over an unprofiled step
    if f["kind"] == fix == "sync":  # the reads, not the collective waited for between them
        return reads_pick(report, fix, slowdown)
    also = [k for k, fixes in fix_for_finding.items() if fix in fixes and k != f["kind"]
            and k in report["shares"]]
    share = f["share"] + sum(report["shares"][k] for k in also)
    if f["kind"] == "data":
        comm = report["shares"].get("communication", 0.0)  # ranks waiting for the data
        data, (share, most) = share, scaled_share(share + comm, slow)
        return Pick("data", share, 1 / (1 - share),
                    f"Amdahl: the data time and the collectives that wait for it (data {data:.1%} + "
                    f"communication {comm:.1%} of a profiled step, {(data + comm) * step:.1f} ms, {said}: "
                    f"the profiler does not "
                    f"slow the data, and the collectives, which it may slow, take no longer without "
                    f"it, {most}), removed", fix, ("data", "communication"),
                    loose_bound(share, data + comm, slow), void=(data + comm) * slow >= SHARE_CAP,
                    context="" if bound_class(share) == TOO_TIGHT else bound_class(share))
    names = " + ".join([f["kind"], *also])
    profiled, (share, most) = share, scaled_share(share, slow)
    kind = bound_class(share)
    tight = loose_bound(share, profiled, slow) if kind != TOO_TIGHT else (
        f"the {f['kind']} finding fired on its count, not its time: a share of {profiled:.1%} of a "
        f"profiled step, at most {share:.1%} of an unprofiled one, bounds the gain at "
        f"{1 / (1 - share):.3g}x, closer to 1x than two runs of this job minutes apart repeat, so "
        "any measurement would cross it by noise alone")
    return Pick(f["kind"], share, 1 / (1 - share),
                f"Amdahl: the {names} share {profiled:.1%} of a profiled step, {profiled * step:.1f} ms (by "
                f"the diagnosis of the configuration the fix starts from), {said}: a phase takes no longer "
                f"without the profiler than with it, {most}, removed", fix, (f["kind"], *also), tight,
                void=profiled * slow >= SHARE_CAP, context=kind)


def _compute_pick(fix: str, report: Mapping, result: Mapping, job, peak: float) -> Pick:
    """The bound of a compute fix: a larger batch's factor of tokens per step (or the peak),
    else forward + backward over an unprofiled step."""
    if fix == "batch":
        mfu = job.mfu(result, peak)
        shown = percent2(mfu)
        room = 100 / (float(shown.rstrip("%")) or 100 * mfu)  # 1 / MFU, as MFU is printed
        if job.batch_factor is not None and job.batch_factor < 1 / mfu:  # the tighter of the two
            k = job.batch_factor
            return Pick("compute", mfu, k, f"{k:g}x the tokens per step, and a step that cannot "
                        f"get shorter: at most {k:g}x the tokens/s (the measured ceiling, the best rate "
                        f"recorded on this machine and not a hard limit, leaves about {room:.2g}x: its "
                        f"MFU {shown} in the run the fix was chosen from)", fix, (), by_tokens=True)
        return Pick("compute", mfu, 1 / mfu, f"the peak: MFU {shown} can rise to 100 %",
                    fix, (), f"MFU {shown} leaves about {room:.2g}x of room, while a larger batch "
                    "cannot shorten a step: it buys at most its own factor of tokens per step, so the "
                    "peak is not what limits it", context=bound_class(mfu, peak=True))
    compute = report["shares"]["forward"] + report["shares"]["backward"]
    step = profiled_mean_ms(report)  # ms: the step the shares are of
    slow, said = unprofiled_factor(job.profiler_slowdown(report, result), step)  # as every waste fix's
    share, most = scaled_share(compute, slow)
    return Pick("compute", share, 1 / (1 - share),
                f"Amdahl: forward + backward, {compute:.1%} of a profiled step, {compute * step:.1f} ms, "
                f"{said}: a phase takes "
                f"no longer without the profiler than with it, {most}, removed", fix,
                ("forward", "backward"),
                f"the bound counts all of forward and backward ({compute * slow:.1%} of an unprofiled "
                f"step), of which --fix {fix} changes a part the diagnosis does not measure apart",
                void=compute * slow >= SHARE_CAP, context=bound_class(share, broader=True))


def rank_picks(report: Mapping, result: Mapping, job, usable: Sequence[str],
               fix_for_finding: Mapping[str, Sequence[str]], peak: float) -> Pick | None:
    """Among the ``usable`` fixes of the findings above information level, the pick whose bound
    is largest (on a tie, the first in the diagnosis' order); once none is left, the first usable
    compute fix; ``None``: nothing left. ``job``: a :class:`~perfkit.profiling.capstone.CapstoneJob`."""
    picks = [waste_pick(f, fix, report, job.profiler_slowdown(report, result), fix_for_finding)
             for f in report["findings"] if f["severity"] != "info"
             for fix in fix_for_finding.get(f["kind"], ()) if fix in usable]
    if picks:
        return max(picks, key=lambda p: p.bound)  # max keeps the first of equal bounds
    for fix in (x for x in fix_for_finding.get("compute", ()) if x in usable):
        return _compute_pick(fix, report, result, job, peak)
    return None
