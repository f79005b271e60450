"""A client process killed (SIGKILL) while its products are in flight: the
daemon keeps serving another client, and frees what the dead one held:
the session ends (ListRegions for it: NOT_FOUND, where it said
PERMISSION_DENIED while the victim lived), and where the daemon serves
metrics, matmul_regions and matmul_sessions come back to what they were
without the victim.

The victim is busy_client.py; it is killed once it has seen requests in
flight on its regions (ListRegions of its own session).

    MATMUL_TARGET=unix:/path/matmul.sock [MATMUL_METRICS_URL=http://...] \\
        python3 -m unittest discover -s tests/gpu/checks/python \\
        -p 'test_client*'
"""

import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", ".."))
import gpu_env  # noqa: E402

torch = None
matmul_client = None
pb = None


class ClientKilledTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        global torch, matmul_client, pb
        torch, cls.target = gpu_env.require_gpu_daemon()
        import matmul_client as module
        from matmul_client._proto import matmul_pb2
        matmul_client, pb = module, matmul_pb2

    def session_gone(self, survivor, session):
        """Whether the daemon has ended `session` (ListRegions: NOT_FOUND;
        while it lives, PERMISSION_DENIED: it belongs to another
        process)."""
        try:
            survivor._stub.ListRegions(
                pb.ListRegionsRequest(session_id=session), timeout=10)
        except grpc.RpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return True
            if error.code() == grpc.StatusCode.PERMISSION_DENIED:
                return False
            raise
        return False

    def check_product(self, survivor):
        x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(768, 1024, device="cuda", dtype=torch.bfloat16)
        y = survivor.matmul(x, w, transpose_b=True)
        self.assertLess(gpu_env.relative_error(y, x.float() @ w.float().T),
                        1e-2)

    def test_killed_client_is_cleaned_up(self):
        survivor = matmul_client.Client(self.target)
        self.addCleanup(survivor.close)
        torch.manual_seed(5)
        self.check_product(survivor)  # the survivor holds regions too
        # What other clients of this process hold, to compare against later.
        regions_before = gpu_env.metric_samples("matmul_regions")
        sessions_before = gpu_env.metric_samples("matmul_sessions")
        if regions_before is not None:
            others = (sum(regions_before.values())
                      - len(survivor.list_regions()))
        victim = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__),
                                          "busy_client.py"), self.target],
            stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: victim.poll() is None and victim.kill())
        # The victim says when it has products in flight (only it may list
        # its session's regions); a watchdog ends a victim that never does.
        watchdog = threading.Timer(120, victim.kill)
        watchdog.start()
        session = victim.stdout.readline().strip()
        in_flight = victim.stdout.readline().split()
        watchdog.cancel()
        self.assertTrue(session, "busy_client.py printed no session id")
        self.assertEqual(in_flight[:1], ["IN_FLIGHT"],
                         "the victim never had a product in flight")
        self.assertFalse(self.session_gone(survivor, session))
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        self.assertEqual(victim.returncode, -signal.SIGKILL)

        # The daemon goes on serving the survivor meanwhile.
        self.check_product(survivor)

        deadline = time.monotonic() + 60
        while not self.session_gone(survivor, session):
            self.assertLess(time.monotonic(), deadline,
                            "the killed client's session still open after "
                            "60 s")
            time.sleep(0.05)
        self.check_product(survivor)
        print(f"\n  killed with {in_flight[1]} requests in flight on "
              f"{in_flight[2]} regions; its session ended")

        if regions_before is None:
            return  # the daemon serves no metrics here: ListRegions it is
        expected = others + len(survivor.list_regions())
        deadline = time.monotonic() + 30
        while True:
            regions = gpu_env.metric_samples("matmul_regions")
            sessions = gpu_env.metric_samples("matmul_sessions")
            if (sum(regions.values()) == expected
                    and sessions == sessions_before):
                break
            self.assertLess(time.monotonic(), deadline,
                            f"matmul_regions {regions} (expected {expected} "
                            f"in all), matmul_sessions {sessions} (before the "
                            f"victim: {sessions_before})")
            time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
