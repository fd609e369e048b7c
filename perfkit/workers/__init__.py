"""Worker entry points that :func:`perfkit.dist.launch` runs under torchrun.

Each module here parses its command line, joins the process group with
:func:`perfkit.dist.init_worker`, calls library functions, hands JSON to
:func:`perfkit.dist.worker_result` and ends with :func:`perfkit.dist.shutdown`.
No experiment logic lives here; it lives in ``perfkit.comm``, ``perfkit.dp`` and
``perfkit.compress`` where it can be tested and reused.
"""
