"""Experiment jobs: the entry points that :func:`perfkit.dist.launch` runs under torchrun.

Each module here parses its command line (``--config`` JSON), joins the process group with
:func:`perfkit.dist.init_worker`, runs its experiment, hands JSON to
:func:`perfkit.dist.worker_result` and ends with :func:`perfkit.dist.shutdown`. The
modules hold experiment *drivers* (which model, which sizes, what to time); the components
they drive (collectives, data-parallel synchronisers, compressors and their DDP hook)
live in ``perfkit.comm``, ``perfkit.parallel`` and ``perfkit.compress`` (its DDP hook in
``perfkit.compress.hook``), where they are tested on their own. ``perfkit.jobs.suite``
runs several drivers in one job, since starting a job (every process imports torch) costs
seconds. The labs' graders and their fixtures live with the course tooling (``tools.labs``).

Usage::

    from perfkit import dist
    res = dist.launch("perfkit.jobs.collectives", 2, ["--config", '{"ring": {"sizes": [7]}}'])
    print(res[0]["ring"][0]["int_exact"])
"""
