"""The labs' graders: checks, mutants and the graded torchrun jobs.

``checks_labNN.py`` holds each lab's ``QUESTIONS`` (run by :mod:`tools.grade`),
``mutants_labNN.py`` its plausible wrong answers, and ``ring_check``, ``zero_check``,
``block_check`` and ``tp_check`` the jobs that run a student's answer on real processes::

    python -m tools.grade labs/lab02_communication.ipynb
    torchrun --nproc-per-node 2 -m tools.labs.zero_check --config '{"steps": 5}'
    python -m pytest -q tests/labs   # every check passes the solution, fails every mutant
"""
