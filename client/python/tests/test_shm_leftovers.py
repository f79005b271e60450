"""Segments a killed client leaves in /dev/shm: the daemon opens a segment
by name at RegisterRegion, so the client can unlink it only once that
answers; a client killed inside that window leaves the name behind, and the
next client of the same user removes it. No daemon needed: RegisterRegion
is replaced by a stall, which is where the kill lands.

    python3 -m unittest discover -s client/python/tests
"""

import os
import signal
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# The source tree's package, unless the test is of the installed one
# (install_test.sh).
if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(HERE, ".."))

from matmul_client import _shm_segment  # noqa: E402

# A client whose RegisterRegion never answers: it prints the segment's name
# and waits to be killed.
STALLED_CLIENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {package!r})
    from matmul_client import _client
    def stall(self, request):
        print(request.shm.name, flush=True)
        time.sleep(3600)
    _client.Client.session_id = property(lambda self: "session")
    _client.Client.register_region = stall
    _client.Client("unix:/nonexistent", shm_prefix={prefix!r}).shared_buffer(
        4096)
""")

# A fresh process's first segment, which reaps what dead clients left.
NEXT_CLIENT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {package!r})
    from matmul_client import _shm_segment
    _shm_segment._SharedSegment(4096, {prefix!r}).close()
""")


class ShmLeftoversTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isdir("/dev/shm"):
            raise unittest.SkipTest("no /dev/shm")
        self.prefix = f"matmultest{os.getpid()}"
        self.addCleanup(self.remove_all)

    def remove_all(self):
        for name in os.listdir("/dev/shm"):
            if name.startswith(self.prefix + "-"):
                os.unlink("/dev/shm/" + name)

    def run_script(self, script, **kwargs):
        code = script.format(package=os.path.join(HERE, ".."),
                             prefix=self.prefix)
        return subprocess.Popen([sys.executable, "-c", code],
                                stdout=subprocess.PIPE, text=True, **kwargs)

    def stalled_client(self):
        """A client stuck in RegisterRegion, and its segment's name."""
        process = self.run_script(STALLED_CLIENT)
        self.addCleanup(lambda: (process.kill(), process.wait(),
                                 process.stdout.close()))
        name = process.stdout.readline().strip()
        self.assertTrue(name.startswith(f"{self.prefix}-py{process.pid}-"),
                        name)
        self.assertTrue(os.path.exists("/dev/shm/" + name))
        return process, name

    def test_a_killed_clients_segment_is_reaped_by_the_next_client(self):
        process, name = self.stalled_client()
        process.send_signal(signal.SIGKILL)
        process.wait()
        # Killed inside the window: the name outlived its maker.
        self.assertTrue(os.path.exists("/dev/shm/" + name))
        next_client = self.run_script(NEXT_CLIENT)
        self.assertEqual(next_client.communicate(timeout=60)[0], "")
        self.assertEqual(next_client.returncode, 0)
        self.assertFalse(os.path.exists("/dev/shm/" + name))

    def test_a_live_clients_segment_is_left_alone(self):
        process, name = self.stalled_client()
        self.assertEqual(_shm_segment._reap_orphaned_segments(self.prefix), [])
        self.assertTrue(os.path.exists("/dev/shm/" + name))
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.assertEqual(_shm_segment._reap_orphaned_segments(self.prefix),
                         [name])
        self.assertFalse(os.path.exists("/dev/shm/" + name))

    def test_names_from_another_pid_namespace_are_left_alone(self):
        namespace = _shm_segment._pid_namespace()
        if namespace is None:
            raise unittest.SkipTest("no /proc/self/ns/pid")
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        ours = f"{self.prefix}-py{dead.pid}-{namespace}-00ff00ff00ff00ff"
        theirs = f"{self.prefix}-py{dead.pid}-{namespace + 1}-00ff00ff00ff00ff"
        for name in (ours, theirs):
            with open("/dev/shm/" + name, "wb"):
                pass
        self.assertEqual(_shm_segment._reap_orphaned_segments(self.prefix),
                         [ours])
        self.assertTrue(os.path.exists("/dev/shm/" + theirs))

    def test_names_of_other_formats_are_left_alone(self):
        for name in (f"{self.prefix}-12345-00ff", f"{self.prefix}-pyx-1-2",
                     f"{self.prefix}-py1-2"):
            with open("/dev/shm/" + name, "wb"):
                pass
            self.assertIsNone(_shm_segment._segment_owner(name, self.prefix))
        self.assertEqual(_shm_segment._reap_orphaned_segments(self.prefix), [])


if __name__ == "__main__":
    unittest.main()
