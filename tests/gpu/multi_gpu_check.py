"""Several GPUs behind one daemon (`matmul-server --cuda_devices=all`),
driven by the Python client. Run by tests/gpu/steps/multi_gpu.sh (first
argument: the daemon's target); with fewer than two GPUs it prints SKIP and
exits 0.

Checks, each against torch.matmul in FP32 on the same inputs (relative norm
error < 1e-2): CUDA tensors on each GPU (cuda_ipc regions) run on that GPU
(the response's device_index), one client thread per GPU at once, NT and NN;
CPU tensors (shared memory) run on some GPU. Then a figure, not a check:
products per second of 8192x8192x4096 NT with two client threads on GPU 0
alone, and with two on each GPU (wall clock over the Python client, and the
sum of the kernel times the daemon reported per GPU). Prints one line per
case; exits non-zero if any failed.
"""
import sys
import threading
import time

import torch

import matmul_client

TARGET = sys.argv[1]
GPUS = torch.cuda.device_count()
if GPUS < 2:
    print(f"SKIP: {GPUS} GPU(s); this check needs two")
    sys.exit(0)

failures = []
lock = threading.Lock()


def report(ok, line, name):
    with lock:
        print(f"{'PASS' if ok else 'FAIL'} {line}")
        if not ok:
            failures.append(name)


def error(got, want):
    return ((got.float() - want).norm() / want.norm()).item()


def products_on(device, rounds):
    client = matmul_client.Client(TARGET, client_name=f"gpu {device} thread")
    try:
        for i in range(rounds):
            transpose_b = i % 2 == 0
            a = torch.randn(300 + i, 512, device=f"cuda:{device}",
                            dtype=torch.bfloat16)
            b = torch.randn(768, 512, device=f"cuda:{device}",
                            dtype=torch.bfloat16)
            if not transpose_b:
                b = b.T.contiguous()
            got = client.matmul(a, b, transpose_b=transpose_b)
            want = a.float() @ (b.float().T if transpose_b else b.float())
            err = error(got, want)
            ran_on = client.last_response.device_index
            name = f"cuda:{device} {'NT' if transpose_b else 'NN'} round {i}"
            report(err < 1e-2 and ran_on == device and got.device == a.device,
                   f"{name}: relative error {err:.2e}, ran on device "
                   f"{ran_on}", name)
    finally:
        client.close()


threads = [threading.Thread(target=products_on, args=(d, 6))
           for d in range(GPUS)]
for t in threads:
    t.start()
for t in threads:
    t.join()

with matmul_client.Client(TARGET) as client:
    a = torch.randn(200, 256, dtype=torch.bfloat16)
    b = torch.randn(256, 96, dtype=torch.bfloat16)
    got = client.matmul(a, b)
    err = error(got, a.float() @ b.float())
    report(err < 1e-2, f"cpu tensors (shm): relative error {err:.2e}, ran "
           f"on device {client.last_response.device_index}", "cpu tensors")
    devices = client.server_info().devices
    report(len(devices) == GPUS, f"GetServerInfo lists {len(devices)} "
           f"devices for {GPUS} GPUs", "server info")


def throughput(devices, threads_per_device=2, rounds=40):
    m, n, k = 8192, 8192, 4096
    kernel_seconds = {d: 0.0 for d in devices}

    def run(device):
        client = matmul_client.Client(TARGET)
        a = torch.randn(m, k, device=f"cuda:{device}", dtype=torch.bfloat16)
        w = torch.randn(n, k, device=f"cuda:{device}", dtype=torch.bfloat16)
        out = torch.empty(m, n, device=f"cuda:{device}", dtype=torch.bfloat16)
        client.matmul(a, w, out=out, transpose_b=True)  # registers, tunes
        barrier.wait()
        total = 0.0
        for _ in range(rounds):
            client.matmul(a, w, out=out, transpose_b=True)
            total += client.last_response.timing.kernel_seconds
        with lock:
            kernel_seconds[device] += total
        client.close()

    workers = [threading.Thread(target=run, args=(d,))
               for d in devices for _ in range(threads_per_device)]
    barrier = threading.Barrier(len(workers) + 1)
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    count = len(workers) * rounds
    tflops = 2.0 * m * n * k * count / seconds * 1e-12
    busy = ", ".join(f"GPU {d} kernels {kernel_seconds[d]:.2f} s"
                     for d in devices)
    print(f"INFO {len(devices)} GPU(s), {len(workers)} client threads: "
          f"{count / seconds:.0f} products/s, {tflops:.0f} TFLOP/s over "
          f"{seconds:.2f} s wall ({busy})")
    return tflops


one = throughput([0])
both = throughput(list(range(GPUS)))
print(f"INFO scaling with {GPUS} GPUs: {both / one:.2f}x")

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
