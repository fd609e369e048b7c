"""The shape sweep's figure: which widths get which marker, and the axis the spread needs."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from perfkit.compute.kernels import ShapePoint  # noqa: E402
from perfkit.viz.compute import plot_shape_sweep  # noqa: E402


def pts(dtype, rates):
    return [ShapePoint(1024, n, 256, dtype, 1e-3, r) for n, r in rates.items()]


def test_shape_sweep_marks_multiples_odd_and_off_grid_even_widths_apart():
    rates = {1024: 1.4e11, 1016: 1.6e11, 1017: 1.5e11, 1019: 1.5e11, 1022: 1.45e11}
    fig = plot_shape_sweep(pts("float32", rates))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear" and "GFLOP/s" in ax.get_ylabel()  # one dtype: readable ticks
    groups = [c.get_offsets()[:, 0].tolist() for c in ax.collections]  # filled, crosses, hollow
    assert groups == [[1024], [1017, 1019], [1016, 1022]]  # odd widths are their own group
    assert np.allclose(ax.collections[0].get_offsets()[:, 1], [140])  # in GFLOP/s
    assert "x = odd" in ax.get_title()
    plt.close(fig)
    two = plot_shape_sweep(pts("float32", {1024: 1.4e11, 1017: 1.5e11})
                           + pts("bfloat16", {1024: 2e9, 1017: 2e9}))
    assert two.axes[0].get_yscale() == "log"  # ceilings a hundredfold apart
    plt.close(two)
    with pytest.raises(ValueError, match="points"):
        plot_shape_sweep([])
