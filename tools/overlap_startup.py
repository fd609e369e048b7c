"""IPython startup file: record figures with overlapping text while a notebook runs.

The notebook tests copy this into a temporary ``$IPYTHONDIR/profile_default/startup/``;
after every cell, each open figure is checked with ``perfkit.viz.text_overlaps`` (before
the inline backend shows and closes it) and offenders are appended, one JSON line each, to
``$PERFKIT_OVERLAP_LOG``.
"""

import json
import os


def _check_figures(*_args) -> None:
    import sys

    if "matplotlib.pyplot" not in sys.modules:  # no figure can exist yet
        return
    import matplotlib.pyplot as plt

    from perfkit.viz import text_overlaps

    for n in plt.get_fignums():
        fig = plt.figure(n)
        pairs = text_overlaps(fig)
        if pairs:
            title = fig.axes[0].get_title() if fig.axes else ""
            with open(os.environ["PERFKIT_OVERLAP_LOG"], "a") as log:
                log.write(json.dumps({"title": title, "pairs": pairs}) + "\n")


if os.environ.get("PERFKIT_OVERLAP_LOG"):
    get_ipython().events.register("post_execute", _check_figures)  # noqa: F821 (IPython's global)
