"""Several GPUs behind one daemon (`matmul-server --cuda_devices=all`),
driven by the Python client. Run by tests/gpu/checks/multi_gpu.sh (first
argument: the daemon's target; second: its metrics URL); with fewer than
two GPUs it prints SKIP and exits 0.

Checks, each against torch.matmul in FP32 on the same inputs (relative norm
error < 1e-2): CUDA tensors on each GPU (cuda_ipc regions) run on that GPU
(the response's device_index), one client thread per GPU at once, NT and NN;
CPU tensors (shared memory) run on some GPU; a product whose operands sit
on two GPUs is refused (FAILED_PRECONDITION, "one GPU"). The metrics count
launches on every GPU, and each device label's UUID (matmul_device_info,
what the dashboard joins DCGM on) is that GPU's. Then a figure, not a check:
products per second of 8192x8192x4096 NT with two client threads on GPU 0
alone, and with two on each GPU (wall clock over the Python client, and the
sum of the kernel times the daemon reported per GPU). Prints one line per
case; exits non-zero if any failed.
"""
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)

import grpc  # noqa: E402
import torch  # noqa: E402

import matmul_client  # noqa: E402

TARGET = sys.argv[1]
METRICS = sys.argv[2] if len(sys.argv) > 2 else None
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

    a = torch.randn(64, 128, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(128, 32, device="cuda:1", dtype=torch.bfloat16)
    try:
        client.matmul(a, b)
        client.synchronize()  # a stream-ordered product's error raises here
        refused = None
    except matmul_client.MatmulError as caught:
        refused = caught
    report(refused is not None and
           refused.code == grpc.StatusCode.FAILED_PRECONDITION and
           "one GPU" in refused.details,
           f"operands on cuda:0 and cuda:1: {refused!r}", "two-GPU operands")


def check_metrics():
    """Launches counted on every GPU; each device's UUID label is its own."""
    text = urllib.request.urlopen(METRICS, timeout=10).read().decode()
    launches, uuids = {}, {}
    for line in text.splitlines():
        m = re.match(r'matmul_launch_duration_seconds_count\{.*'
                     r'device="(\w+)".*\} (\S+)', line)
        if m:
            launches[m.group(1)] = launches.get(m.group(1), 0) + \
                float(m.group(2))
        m = re.match(r'matmul_device_info\{(.*)\} ', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            uuids[labels["device"]] = labels["uuid"]
    for device in range(GPUS):
        count = launches.get(str(device), 0)
        report(count > 0, f"metrics: {count:.0f} launches on device "
               f"{device}", f"launches on {device}")
        want = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if want is None:
            print(f"INFO device {device}: torch gives no UUID to compare "
                  f"with {uuids.get(str(device))}")
            continue
        got = uuids.get(str(device), "")

        def bare(uuid):
            return str(uuid).lower().removeprefix("gpu-").replace("-", "")
        report(bare(got) == bare(want), f"metrics: device {device} has UUID "
               f"{got} (torch: {want})", f"uuid of {device}")


if METRICS:
    check_metrics()


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
