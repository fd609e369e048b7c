"""Plots and thin widget builders; one submodule per course topic, re-exported here.

``perfkit.viz.core`` holds the widget machinery (:class:`WidgetSpec`, :func:`build_widget`),
headline figures and the roofline plot; topic plots live beside it. Nothing here measures:
plots consume the records other perfkit modules return.
"""

from perfkit.viz.comm import (
    collectives_widget,
    compression_widget,
    plot_buckets_accumulation,
    plot_collectives,
    plot_compression_tradeoff,
    plot_convergence,
    plot_data_parallel,
    plot_kernel_shares,
    plot_method_comparison,
)
from perfkit.viz.compute import (
    compute_widget,
    plot_attention_sweep,
    plot_break_even,
    plot_shape_sweep,
    plot_throughput,
)
from perfkit.viz.core import (
    HEADLINE_MIME,
    Choice,
    FloatControl,
    IntControl,
    LogControl,
    WidgetSpec,
    build_widget,
    plot_roofline,
    roofline_widget,
    show_headlines,
    si,
)
from perfkit.viz.data import loader_widget, plot_loader_sweep, plot_overlap
from perfkit.viz.memory import (
    MEMORY_COLORS,
    memory_widget,
    plot_loss_curves,
    plot_memory_stack,
    plot_zero_comparison,
    plot_zero_stages,
    zero_widget,
)
from perfkit.viz.profiling import (
    PHASE_COLORS,
    breakdown_widget,
    findings_markdown,
    plot_diagnosis,
    plot_phase_bars,
    summary_markdown,
    top_ops_markdown,
)

__all__ = [
    "compute_widget",
    "plot_attention_sweep",
    "plot_break_even",
    "plot_shape_sweep",
    "plot_throughput",
    "collectives_widget",
    "compression_widget",
    "plot_buckets_accumulation",
    "plot_collectives",
    "plot_compression_tradeoff",
    "plot_kernel_shares",
    "plot_convergence",
    "plot_data_parallel",
    "plot_method_comparison",
    "loader_widget",
    "plot_loader_sweep",
    "plot_overlap",
    "MEMORY_COLORS",
    "memory_widget",
    "plot_loss_curves",
    "plot_memory_stack",
    "plot_zero_comparison",
    "plot_zero_stages",
    "zero_widget",
    "PHASE_COLORS",
    "breakdown_widget",
    "findings_markdown",
    "plot_diagnosis",
    "plot_phase_bars",
    "summary_markdown",
    "top_ops_markdown",
    "HEADLINE_MIME",
    "Choice",
    "FloatControl",
    "IntControl",
    "LogControl",
    "WidgetSpec",
    "build_widget",
    "plot_roofline",
    "roofline_widget",
    "show_headlines",
    "si",
]
