"""What the GPU tests of the Python client share: the daemon they talk to
(MATMUL_TARGET, a `matmul-server --backend=cuda`; MATMUL_METRICS_URL, its
/metrics when it serves them), the skip when there is no GPU, torch or
daemon, and the comparison against torch.

tests/gpu/steps/python_torch.sh starts the daemon and sets both."""

import os
import sys
import unittest
import urllib.request

REPO = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "client", "python"))


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
