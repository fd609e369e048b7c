"""Run a pickled ``main(argv)`` as a script: what a lab grader launches under torchrun.

    python tools/run_main.py MAIN.pkl [ARGS...]

``MAIN.pkl`` is a cloudpickle file of a function written in a notebook (see
``tools.grade.pickled``); it is called with the remaining arguments, on every rank, like a
training script's ``main``. ``examples/`` is on the path, so the function may use the
course's jobs (``import slow_train``).
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python tools/run_main.py MAIN.pkl [ARGS...]")
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import cloudpickle

    from perfkit import dist

    # a rank that raises before (or without) dist.init_worker still leaves its traceback
    # where dist.launch reads it, and exits at once instead of waiting for its peers
    sys.excepthook = dist._excepthook
    with open(sys.argv[1], "rb") as fh:
        main = cloudpickle.load(fh)
    sys.argv = [sys.argv[0], *sys.argv[2:]]  # what the function sees, as a script would
    sys.exit(main(sys.argv[1:]))
