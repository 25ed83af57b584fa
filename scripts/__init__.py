"""Scripts that are neither benchmarks nor part of the package: the GPU smoke check (``gpu_check``, ``make
gpu-check``) and the template-collapse simulator demo (``collapse_simulator_demo``, which writes
``docs/results``' simulator sweep). Run from the repository root as ``python -m scripts.<name>``."""
