"""The plugin's tests run on the cpu target unless XLA_GPU_PJRT_TARGET says
otherwise: with the default (auto) a machine with a GPU would move them to
the cuda target, whose behaviour (device memory, no LAPACK lowerings) they
were not written for. test_pjrt_cuda.py sets the target per case."""
import os

os.environ.setdefault("XLA_GPU_PJRT_TARGET", "cpu")
