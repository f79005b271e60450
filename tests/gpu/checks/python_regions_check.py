"""Zero-copy regions on a GPU daemon, driven by the Python client.

Run by tests/gpu/checks/python_regions.sh against `matmul-server
--backend=cuda` (first argument: its target). Checks, each against
torch.matmul in FP32 on the same inputs (relative norm error < 1e-2):
CUDA tensors by IPC handle (NN, NT, batched, out= with beta), CPU tensors
through shared memory (registered with CUDA by the daemon), that a bogus
IPC handle is refused with FAILED_PRECONDITION while the daemon keeps
serving, cuMemCreate allocations registered as cuda_vmm regions
(pidfd_getfd) in both forms (one allocation; three chunks mapped back to
back, operands across the chunk boundaries), and PyTorch's
expandable-segments allocator in a child process started with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (this script again, with
--expandable-segments: tensors over several chunks, strided views at
offsets, out= with beta, only cuda_vmm regions and those cached, new memory
after empty_cache). Prints one line per case and exits non-zero if any
failed.
"""
import ctypes
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)

import torch  # noqa: E402

import matmul_client  # noqa: E402
from matmul_client._proto import matmul_pb2  # noqa: E402

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


def vmm_case(client, chunks):
    """cuMemCreate allocations exported as POSIX fds (what cudaMallocAsync
    pools and expandable segments use), registered as a cuda_vmm region;
    A, B and C live in it and C is written in place. chunks=1 sends the
    one-allocation form (fd, size_bytes); more sends chunk_fds, mapped back
    to back by the daemon as by this process, with A and B straddling chunk
    boundaries."""
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
    g = granularity.value
    m, n, k = 384, 320, 256
    sizes = [m * k * 2, n * k * 2, m * n * 2]
    if chunks == 1:
        chunk = -(-(3 << 20) // g) * g
        offsets = [0, 1 << 20, 2 << 20]
    else:
        chunk = -(-(sizes[2] + (1 << 20)) // g) * g
        # A across the first boundary, B across the second, C after B.
        offsets = [chunk - sizes[0] // 2, 2 * chunk - sizes[1] // 2,
                   2 * chunk + (512 << 10)]
    size = chunks * chunk
    handles = [ctypes.c_ulonglong() for _ in range(chunks)]
    fds = [ctypes.c_int(-1) for _ in range(chunks)]
    address = ctypes.c_ulonglong()
    mapped = 0
    try:
        ok(cu.cuMemAddressReserve(ctypes.byref(address), ctypes.c_size_t(size),
                                  ctypes.c_size_t(0), ctypes.c_ulonglong(0),
                                  ctypes.c_ulonglong(0)), "reserve")
        for i in range(chunks):
            ok(cu.cuMemCreate(ctypes.byref(handles[i]), ctypes.c_size_t(chunk),
                              ctypes.byref(prop), ctypes.c_ulonglong(0)),
               "cuMemCreate")
            ok(cu.cuMemMap(ctypes.c_ulonglong(address.value + i * chunk),
                           ctypes.c_size_t(chunk), ctypes.c_size_t(0),
                           handles[i], ctypes.c_ulonglong(0)), "map")
            mapped += 1
            ok(cu.cuMemExportToShareableHandle(ctypes.byref(fds[i]),
                                               handles[i], 1,
                                               ctypes.c_ulonglong(0)),
               "export")
        access = _AccessDesc(_Location(1, torch.cuda.current_device()), 3)
        ok(cu.cuMemSetAccess(address, ctypes.c_size_t(size),
                             ctypes.byref(access), ctypes.c_size_t(1)),
           "access")
        x, w = rand(m, k), rand(n, k)
        torch.cuda.synchronize()
        for tensor, offset in ((x, offsets[0]), (w, offsets[1])):
            ok(cu.cuMemcpyDtoD_v2(ctypes.c_ulonglong(address.value + offset),
                                  ctypes.c_ulonglong(tensor.data_ptr()),
                                  ctypes.c_size_t(tensor.numel() * 2)), "copy in")
        request = matmul_pb2.RegisterRegionRequest()
        request.cuda_vmm.pid = os.getpid()
        if chunks == 1:
            request.cuda_vmm.fd = fds[0].value
        else:
            request.cuda_vmm.chunk_fds.extend(fd.value for fd in fds)
            request.cuda_vmm.chunk_bytes = chunk
        request.cuda_vmm.size_bytes = size
        request.cuda_vmm.device_ordinal = torch.cuda.current_device()
        if chunks == 1:
            # The same real allocation, but naming another process (our
            # parent): the daemon takes fds only out of its caller.
            foreign = matmul_pb2.RegisterRegionRequest()
            foreign.CopyFrom(request)
            foreign.cuda_vmm.pid = os.getppid()
            try:
                client.register_region(foreign)
                print("FAIL cuda vmm naming another pid: accepted")
                failures.append("vmm foreign pid")
            except matmul_client.MatmulError as e:
                refused = "PERMISSION_DENIED" in str(e.code)
                print(f"{'PASS' if refused else 'FAIL'} cuda vmm naming "
                      f"another pid: {e.code}: {str(e)[:160]}")
                if not refused:
                    failures.append("vmm foreign pid")
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
        form = "one allocation" if chunks == 1 else f"{chunks} chunks"
        check(f"cuda vmm region of {form}, in place ({response.kernel})", out,
              x.float() @ w.float().T)
        client.unregister_region(region)
    finally:
        for fd in fds:
            if fd.value >= 0:
                os.close(fd.value)
        for i in reversed(range(mapped)):
            cu.cuMemUnmap(ctypes.c_ulonglong(address.value + i * chunk),
                          ctypes.c_size_t(chunk))
        if address.value:
            cu.cuMemAddressFree(address, ctypes.c_size_t(size))
        for handle in reversed(handles):
            if handle.value:
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
    for chunks in (1, 3):
        try:
            vmm_case(client, chunks)
        except Exception as e:  # report, then go on with the other cases
            print(f"FAIL cuda vmm region of {chunks} chunk(s): "
                  f"{type(e).__name__}: {str(e)[:300]}")
            failures.append(f"vmm {chunks}")
    client.close()

    # The expandable-segments allocator reads PYTORCH_CUDA_ALLOC_CONF when
    # torch initialises CUDA, so its cases run in a fresh process whose
    # environment has it from the start.
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    try:
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), TARGET,
             "--expandable-segments"],
            env=env, capture_output=True, text=True, timeout=150)
        output, rc = child.stdout, child.returncode
        if rc != 0 and child.stderr.strip():
            output += "stderr: " + child.stderr.strip()[-1500:] + "\n"
    except subprocess.TimeoutExpired as e:
        output, rc = e.stdout or "", "timeout"  # bytes despite text=True
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
    for line in output.splitlines():
        print(f"  {line}")
    print(f"{'PASS' if rc == 0 else 'FAIL'} expandable segments (child "
          f"process, exit {rc})")
    if rc != 0:
        failures.append("expandable segments")

    print(f"python regions: {len(failures)} failed")
    return 1 if failures else 0


def expandable_segments_main():
    """The cases of PyTorch's expandable-segments allocator, run in a
    process started with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True:
    every CUDA tensor here lives in cuMemCreate chunks, which the client
    must register as cuda_vmm regions (chunk fds), never as cuda_ipc."""
    from matmul_client._share_handles import parse_share_handle
    if "expandable_segments:True" not in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", ""):
        print("FAIL expandable: PYTORCH_CUDA_ALLOC_CONF lacks "
              "expandable_segments:True")
        return 1
    torch.manual_seed(1)
    client = matmul_client.Client(TARGET)
    t = {}

    def run(name, body):
        try:
            body()
        except Exception as e:  # report, then go on with the other cases
            print(f"FAIL {name}: {type(e).__name__}: {str(e)[:400]}")
            failures.append(name)

    def handle_format():
        # What this torch hands out, for the log (and a check that the
        # allocator really is the expandable-segments one).
        w = t["w"] = rand(8192, 4096)  # 64 MiB: several 20-MiB chunks
        shared = w.untyped_storage()._share_cuda_()
        release = getattr(torch.UntypedStorage, "_release_ipc_counter_cuda",
                          None)
        if release is not None and shared[4]:
            release(shared[4], shared[5])
        memory = parse_share_handle(shared[1])
        ok = hasattr(memory, "fds") and len(memory.fds) > 1
        print(f"{'PASS' if ok else 'FAIL'} expandable: torch "
              f"{torch.__version__} shares W ({w.nbytes} bytes) as handle "
              f"version {shared[1][0]}: {memory!r:.200}, W at byte "
              f"{shared[3]}")
        if not ok:
            failures.append("handle format")

    def small():
        x, w = rand(128, 256), rand(64, 256)
        check("expandable: small NT", client.matmul(x, w, transpose_b=True),
              x.float() @ w.float().T)

    def several_chunks():
        if "w" not in t:  # handle_format failed before making it
            t["w"] = rand(8192, 4096)
        t["x"] = rand(256, 4096)
        x, w = t["x"], t["w"]
        t["y"] = y = client.matmul(x, w, transpose_b=True)
        check("expandable: x @ W.T, W over several chunks", y,
              x.float() @ w.float().T)

    def views():
        x, w = t["x"], t["w"]
        a, b = x[32:, 1024:3072], w[100:612, 512:2560]  # offsets, strides
        check("expandable: strided views at storage offsets",
              client.matmul(a, b, transpose_b=True), a.float() @ b.float().T)

    def out_with_beta():
        x, w = t["x"], t["w"]
        out = rand(256, 8192)
        want = 0.5 * (x.float() @ w.float().T) + out.float()
        client.matmul(x, w, out=out, transpose_b=True, alpha=0.5, beta=1.0)
        check("expandable: out= with beta, in place", out, want)

    def batched():
        a3, b3 = rand(4, 64, 96), rand(4, 96, 80)
        check("expandable: batched", client.matmul(a3, b3),
              a3.float() @ b3.float())

    def regions_are_vmm_and_cached():
        x, w, y = t["x"], t["w"], t["y"]
        client.matmul(x, w, out=y, transpose_b=True)
        regions = client.list_regions()
        # Stream-ordered products add the client's words: one small shm
        # region (a page at most), not an operand's.
        operands = [r for r in regions
                    if not (r.kind == "shm" and r.size_bytes <= 4096)]
        kinds = sorted({r.kind for r in operands})
        largest = max(r.size_bytes for r in operands)
        ok = kinds == ["cuda_vmm"] and largest >= w.nbytes
        print(f"{'PASS' if ok else 'FAIL'} expandable: regions {kinds}, "
              f"{len(operands)} of them, largest {largest} bytes (W: "
              f"{w.nbytes})")
        if not ok:
            failures.append("region kinds")
        client.matmul(x, w, out=y, transpose_b=True)
        again = len(client.list_regions())
        ok = again == len(regions)
        print(f"{'PASS' if ok else 'FAIL'} expandable: the same product "
              f"again registers nothing ({len(regions)} -> {again} regions)")
        if not ok:
            failures.append("region cache")

    def after_empty_cache():
        # torch unmaps the chunks and closes its fds; new tensors may get
        # the same addresses and fd numbers for new memory, which the
        # client must not take for the old regions.
        t.clear()
        torch.cuda.empty_cache()
        x, w = rand(256, 4096), rand(8192, 4096)
        check("expandable: new memory after empty_cache",
              client.matmul(x, w, transpose_b=True), x.float() @ w.float().T)
        print(f"INFO expandable: {len(client.list_regions())} regions after "
              "empty_cache")

    run("handle format", handle_format)
    run("small", small)
    run("several chunks", several_chunks)
    if "y" in t:
        run("views", views)
        run("out with beta", out_with_beta)
        run("regions", regions_are_vmm_and_cached)
    run("batched", batched)
    run("after empty_cache", after_empty_cache)
    client.close()
    print(f"expandable segments: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(expandable_segments_main()
             if sys.argv[2:] == ["--expandable-segments"] else main())
