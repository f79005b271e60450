"""What the Python scripts under tests/gpu share, as cuda_daemon.sh is for
the shell ones: importing it puts the checkout's Python client
(client/python) first on sys.path, so that `import matmul_client` takes
this checkout's, with the native extension built beside it
(tests/gpu/build_native_for_device.sh). Each script finds this module
so:

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(
        __file__)), "..", ".."))  # as many ".." as it is deep in tests/gpu
    import gpu_env  # noqa: E402

and is given its daemon by the shell script that started it (MATMUL_TARGET
and MATMUL_METRICS_URL for the unittest checks, --target for the others):
no Python script starts a daemon of its own. Also here: the unittest
checks' skip when there is no GPU, torch or daemon, and their comparison
against torch.
"""

import os
import sys
import unittest
import urllib.request

GPU_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(GPU_DIR))
CLIENT = os.path.join(REPO, "client", "python")
if CLIENT not in sys.path:
    sys.path.insert(0, CLIENT)


def require_gpu_daemon():
    """(torch, target) or unittest.SkipTest saying what is missing."""
    try:
        import torch
    except ImportError:
        raise unittest.SkipTest("torch is not installed") from None
    if not torch.cuda.is_available():
        raise unittest.SkipTest("no CUDA device")
    target = os.environ.get("MATMUL_TARGET")
    if not target:
        raise unittest.SkipTest("set MATMUL_TARGET to a CUDA matmul-server")
    return torch, target


def relative_error(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm()).item()


def metric_samples(name):
    """{labels text: value} of one metric on the daemon's /metrics, or None
    when MATMUL_METRICS_URL is unset."""
    url = os.environ.get("MATMUL_METRICS_URL")
    if not url:
        return None
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            samples[key[len(name):]] = float(value)
    return samples
