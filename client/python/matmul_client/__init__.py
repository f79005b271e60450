"""Python client of the matmul daemon (BF16 GEMM over gRPC).

    import torch, matmul_client
    y = matmul_client.matmul(x, w, transpose_b=True)   # x @ w.T

CPU tensors reach the daemon through a POSIX shared-memory region of this
process's session (copied in once per call, or not at all when they were
made with Client.shared_tensor); CUDA tensors by their storage's memory
plus byte offset (a cudaMalloc block's CUDA IPC handle, or the POSIX fds of
the expandable-segment chunks that hold it), read and written in place by
the daemon's GPU.
torch is imported only when a torch tensor is passed, so the package also
works without it (HostTensor: raw BF16 / FP32 bytes).

With torch: matmul_client.torch_ops registers the product as the custom
operators torch.ops.matmul_client.matmul / .linear (torch.compile keeps
each as one opaque op), and matmul_client.nn.Linear is a drop-in for
torch.nn.Linear whose forward runs on the daemon. Both import torch, so
they load on first use (import matmul_client.nn, or the attribute).
"""

import importlib as _importlib
from importlib import metadata as _metadata

from ._client import (
    Client,
    close_default_clients,
    default_client,
    matmul,
    matmul_list,
)
from ._errors import MatmulError
from ._product_list import Product, Scratch
from ._shared_weight import SharedWeight
from ._tensors import HostTensor, bf16_bytes, floats_from_bf16

try:
    # The installed distribution's version (client/python/pyproject.toml).
    __version__ = _metadata.version("matmul-client")
except _metadata.PackageNotFoundError:  # used from the source tree
    __version__ = "0.1.0+source"

_TORCH_SUBMODULES = ("nn", "torch_ops", "lora")
# Names of modules that import torch, loaded when first named.
_TORCH_NAMES = {
    "lora_linear": "lora",
    "lora_linears": "lora",
    "LoraLinear": "nn",
    "LoraLinearGroup": "nn",
    "lora_linears_of": "nn",
}


def __getattr__(name):
    # matmul_client.nn / .torch_ops / .lora import torch: loaded when first
    # named.
    if name in _TORCH_SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)
    if name in _TORCH_NAMES:
        module = _importlib.import_module(f".{_TORCH_NAMES[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
    "Client",
    "HostTensor",
    "MatmulError",
    "Product",
    "Scratch",
    "SharedWeight",
    "bf16_bytes",
    "close_default_clients",
    "default_client",
    "floats_from_bf16",
    "matmul",
    "matmul_list",
]
