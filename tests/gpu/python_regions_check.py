"""Zero-copy regions on a GPU daemon, driven by the Python client.

Run by tests/gpu/steps/python_regions.sh against `matmul-server
--backend=cuda` (first argument: its target). Checks, each against
torch.matmul in FP32 on the same inputs (relative norm error < 1e-2):
CUDA tensors by IPC handle (NN, NT, batched, out= with beta), CPU tensors
through shared memory (registered with CUDA by the daemon), the
expandable-segments allocator in a child process, and that a bogus IPC
handle is refused with FAILED_PRECONDITION while the daemon keeps serving,
and a cuMemCreate allocation registered as a cuda_vmm region (pidfd_getfd).
Prints one line per case and exits non-zero if any failed.
"""
import ctypes
import os
import subprocess
import sys

import torch

import matmul_client
from matmul_client._proto import matmul_pb2

TARGET = sys.argv[1]
failures = []


def check(name, got, want):
    err = ((got.float() - want).norm() / want.norm()).item()
    ok = err < 1e-2
    print(f"{'PASS' if ok else 'FAIL'} {name}: relative error {err:.2e}")
    if not ok:
        failures.append(name)


def rand(*shape, device="cuda"):
    return torch.randn(*shape, device=device, dtype=torch.bfloat16)


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte),
                ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


def vmm_case(client):
    """A cuMemCreate allocation exported as a POSIX fd (what cudaMallocAsync
    pools and expandable segments use), registered as a cuda_vmm region;
    A, B and C live in it and C is written in place."""
    cu = ctypes.CDLL("libcuda.so.1")

    def ok(result, what):
        if result != 0:
            raise RuntimeError(f"{what}: CUresult {result}")

    torch.zeros(1, device="cuda")  # the primary context exists
    prop = _AllocationProp()
    prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.location = _Location(1, torch.cuda.current_device())
    granularity = ctypes.c_size_t()
    ok(cu.cuMemGetAllocationGranularity(ctypes.byref(granularity),
                                        ctypes.byref(prop), 0), "granularity")
    m, n, k = 384, 320, 256
    sizes = [m * k * 2, n * k * 2, m * n * 2]
    offsets = [0, 1 << 20, 2 << 20]
    size = -(-(3 << 20) // granularity.value) * granularity.value
    handle = ctypes.c_ulonglong()
    ok(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size),
                      ctypes.byref(prop), ctypes.c_ulonglong(0)), "cuMemCreate")
    address = ctypes.c_ulonglong()
    ok(cu.cuMemAddressReserve(ctypes.byref(address), ctypes.c_size_t(size),
                              ctypes.c_size_t(0), ctypes.c_ulonglong(0),
                              ctypes.c_ulonglong(0)), "reserve")
    ok(cu.cuMemMap(address, ctypes.c_size_t(size), ctypes.c_size_t(0), handle,
                   ctypes.c_ulonglong(0)), "map")
    access = _AccessDesc(_Location(1, torch.cuda.current_device()), 3)
    ok(cu.cuMemSetAccess(address, ctypes.c_size_t(size), ctypes.byref(access),
                         ctypes.c_size_t(1)), "access")
    fd = ctypes.c_int(-1)
    ok(cu.cuMemExportToShareableHandle(ctypes.byref(fd), handle, 1,
                                       ctypes.c_ulonglong(0)), "export")
    try:
        x, w = rand(m, k), rand(n, k)
        torch.cuda.synchronize()
        for tensor, offset in ((x, offsets[0]), (w, offsets[1])):
            ok(cu.cuMemcpyDtoD_v2(ctypes.c_ulonglong(address.value + offset),
                                  ctypes.c_ulonglong(tensor.data_ptr()),
                                  ctypes.c_size_t(tensor.numel() * 2)), "copy in")
        request = matmul_pb2.RegisterRegionRequest()
        request.cuda_vmm.pid = os.getpid()
        request.cuda_vmm.fd = fd.value
        request.cuda_vmm.size_bytes = size
        request.cuda_vmm.device_ordinal = torch.cuda.current_device()
        region = client.register_region(request).region_id

        def tensor(shape, offset):
            t = matmul_pb2.Tensor(dtype=matmul_pb2.DTYPE_BF16, shape=shape)
            t.region.region_id = region
            t.region.offset_bytes = offset
            return t

        product = matmul_pb2.MatmulRequest(
            a=tensor([m, k], offsets[0]), b=tensor([n, k], offsets[1]),
            c=tensor([m, n], offsets[2]), transpose_b=True,
            session_id=client.session_id)
        response = client._stub.Matmul(product, timeout=60)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ok(cu.cuMemcpyDtoD_v2(ctypes.c_ulonglong(out.data_ptr()),
                              ctypes.c_ulonglong(address.value + offsets[2]),
                              ctypes.c_size_t(sizes[2])), "copy out")
        check(f"cuda vmm region, in place ({response.kernel})", out,
              x.float() @ w.float().T)
        client.unregister_region(region)
    finally:
        os.close(fd.value)
        cu.cuMemUnmap(address, ctypes.c_size_t(size))
        cu.cuMemAddressFree(address, ctypes.c_size_t(size))
        cu.cuMemRelease(handle)


def main():
    torch.manual_seed(0)
    client = matmul_client.Client(TARGET)
    x, w = rand(512, 1024), rand(768, 1024)
    check("cuda ipc NT (x @ W.T)", client.matmul(x, w, transpose_b=True),
          x.float() @ w.float().T)
    a, b = rand(300, 257), rand(257, 129)
    check("cuda ipc NN, tails", client.matmul(a, b), a.float() @ b.float())
    a3, b3 = rand(4, 64, 96), rand(4, 96, 80)
    check("cuda ipc batched", client.matmul(a3, b3), a3.float() @ b3.float())
    out = rand(512, 768)
    want = 0.5 * (x.float() @ w.float().T) + 1.0 * out.float()
    client.matmul(x, w, out=out, transpose_b=True, alpha=0.5, beta=1.0)
    check("cuda ipc out= with beta", out, want)
    xc, wc = rand(256, 384, device="cpu"), rand(192, 384, device="cpu")
    check("cpu tensors via shm", client.matmul(xc, wc, transpose_b=True),
          xc.float() @ wc.float().T)

    bogus = matmul_pb2.RegisterRegionRequest()
    bogus.cuda_ipc.handle = os.urandom(64)
    bogus.cuda_ipc.size_bytes = 1 << 20
    try:
        client.register_region(bogus)
        print("FAIL bogus ipc handle: accepted")
        failures.append("bogus handle")
    except matmul_client.MatmulError as e:
        ok = "FAILED_PRECONDITION" in str(e.code)
        print(f"{'PASS' if ok else 'FAIL'} bogus ipc handle: {e.code}: "
              f"{str(e)[:160]}")
        if not ok:
            failures.append("bogus handle")
    check("still serving after the bogus handle",
          client.matmul(x, w, transpose_b=True), x.float() @ w.float().T)
    try:
        vmm_case(client)
    except Exception as e:  # report, then go on with the other cases
        print(f"FAIL cuda vmm region: {type(e).__name__}: {str(e)[:300]}")
        failures.append("vmm")
    client.close()

    # The expandable-segments allocator hands out cuMemCreate memory.
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    child = subprocess.run(
        [sys.executable, "-c",
         "import sys, torch, matmul_client\n"
         "x = torch.randn(128, 256, device='cuda', dtype=torch.bfloat16)\n"
         "w = torch.randn(64, 256, device='cuda', dtype=torch.bfloat16)\n"
         f"y = matmul_client.matmul(x, w, transpose_b=True, target='{TARGET}')\n"
         "r = (x.float() @ w.float().T)\n"
         "e = ((y.float() - r).norm() / r.norm()).item()\n"
         "print(f'relative error {e:.2e}'); sys.exit(0 if e < 1e-2 else 1)\n"],
        env=env, capture_output=True, text=True, timeout=120)
    tail = (child.stdout + child.stderr).strip().splitlines()[-1:] or [""]
    print(f"{'PASS' if child.returncode == 0 else 'FAIL'} expandable "
          f"segments: {tail[0][:200]}")
    if child.returncode != 0:
        failures.append("expandable segments")

    print(f"python regions: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
