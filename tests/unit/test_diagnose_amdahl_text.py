"""perfkit diagnose's report: Amdahl's figure stated as what removing a cause gains if the rest of
the step is unchanged, not as a ceiling (removing work can speed up the rest too)."""

from __future__ import annotations

from perfkit.profiling import build_report, render_text


def test_the_report_states_amdahl_as_conditional_not_as_a_ceiling():
    """Old: 'fixing it can speed the step up at most 2.00x', which notebook 01's data fix beat."""
    cat = {k: 0.0 for k in ("data", "sync", "communication", "optimizer", "backward", "forward", "other")}
    cat.update(optimizer=0.05, forward=0.01, data=0.03)
    rank = {"rank": 0, "status": "complete", "steps_seen": 13, "window_steps": 10, "step_times_s": [0.1] * 10,
            "batch_size": None, "flops_per_step": None, "memory": {"kind": "peak RSS", "bytes": 2**30},
            "trace": "t.json", "note": None,
            "attribution": {"steps": 10, "step_mean_s": 0.1, "category_s": cat, "comm_overlapped_s": 0.0,
                            "syncs_per_step": 1.0, "host_gap_s": 0.01, "ops_per_step": 50.0,
                            "device_idle_share": None}}
    text = render_text(build_report([rank]))
    assert "removing it speeds the step up 2.00x if the rest is unchanged" in text
    assert "at most" not in text
