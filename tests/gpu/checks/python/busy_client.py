"""A client that keeps products in flight until it is killed: started by
test_client_killed.py. Prints its session id, then keeps 4096x4096x4096 NT
products going (matmul_async when the client has it, else four threads
calling matmul), prints "IN_FLIGHT <requests> <regions>" once the daemon
lists requests in flight on its regions, and never exits by itself.

    python3 busy_client.py TARGET
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402,F401 (puts client/python on sys.path)
import torch  # noqa: E402

import matmul_client  # noqa: E402


def report_in_flight(client):
    """Prints IN_FLIGHT once one of this session's regions has requests in
    flight (only the session's own process may list its regions)."""
    while True:
        regions = client.list_regions()
        in_flight = sum(r.requests_in_flight for r in regions)
        if in_flight:
            print(f"IN_FLIGHT {in_flight} {len(regions)}", flush=True)
            return
        time.sleep(0.002)


def main():
    client = matmul_client.Client(sys.argv[1])
    print(client.session_id, flush=True)
    threading.Thread(target=report_in_flight, args=(client,),
                     daemon=True).start()
    torch.manual_seed(4)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
               for _ in range(4)]
    if hasattr(client, "matmul_async"):
        while True:
            futures = [client.matmul_async(x, w, transpose_b=True)
                       for w in weights * 4]
            for future in futures:
                future.result()

    def loop(w):
        while True:
            client.matmul(x, w, transpose_b=True)

    threads = [threading.Thread(target=loop, args=(w,)) for w in weights]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
