"""How much GPU time back-to-back products lose to the CUDA events that
time each one (the daemon records a start and a stop event around every
product): torch.matmul (cuBLAS) on the seed shapes, NT, four
rotating A/C pairs and one shared B as four clients would have them, run
N times back to back (a) with one event pair around the whole run, (b)
with an event pair around each product as well, and (c) with one event
after each product (the previous one's marking the start). Prints, per
shape, the time per product of each and the median of (b)'s and (c)'s
per-product times.
"""
import statistics

import torch

SHAPES = [(5120, 11008, 2048), (5120, 2048, 11008), (5120, 2048, 2048),
          (5120, 512, 2048)]


def run(a, w, c, count, events_per_product):
    events = [torch.cuda.Event(enable_timing=True)
              for _ in range(events_per_product * count + 1)]
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    if events_per_product == 1:
        events[0].record()
    for i in range(count):
        if events_per_product == 2:
            events[2 * i].record()
        torch.matmul(a[i % 4], w.T, out=c[i % 4])
        if events_per_product == 2:
            events[2 * i + 1].record()
        elif events_per_product == 1:
            events[i + 1].record()
    stop.record()
    torch.cuda.synchronize()
    step = events_per_product  # product i lies between these two events
    each = [events[step * i].elapsed_time(events[step * i + 1]) * 1e3
            for i in range(count)] if step else []
    return start.elapsed_time(stop) * 1e3 / count, each


for m, n, k in SHAPES:
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
         for _ in range(4)]
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
         for _ in range(4)]
    count = max(200, int(2.0 / (2 * m * n * k / 600e12)))  # about 2 s
    run(a, w, c, count, 0)  # warm-up: clocks settle under load
    plain, _ = run(a, w, c, count, 0)
    paired, each_pair = run(a, w, c, count, 2)
    marked, each_mark = run(a, w, c, count, 1)
    flops = 2 * m * n * k
    print(f"{m}x{n}x{k}: {count} products; per product {plain:.1f} us "
          f"({flops / plain * 1e-6:.0f} TFLOP/s) with no events between; "
          f"{paired:.1f} us ({flops / paired * 1e-6:.0f}) with a pair "
          f"around each (median {statistics.median(each_pair):.1f}); "
          f"{marked:.1f} us ({flops / marked * 1e-6:.0f}) with one event "
          f"after each (median {statistics.median(each_mark):.1f})")
