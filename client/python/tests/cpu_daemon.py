"""Starts and stops the matmul-server (CPU backend) that a test class runs
against: MATMUL_SERVER names the binary (the test class is skipped without
it); the daemon listens on a unix socket in a temporary directory and, with
tcp=True, on a free loopback port as well."""

import os
import socket
import subprocess
import tempfile
import time
import unittest

import matmul_client


def start_cpu_daemon(test_class, tcp=False):
    """Sets test_class.target ("unix:..."), test_class.remote
    ("127.0.0.1:PORT", with tcp) and what stop_cpu_daemon stops; returns
    once the daemon serves on every address."""
    server = os.environ.get("MATMUL_SERVER")
    if not server:
        raise unittest.SkipTest("set MATMUL_SERVER to a matmul-server")
    test_class.dir = tempfile.TemporaryDirectory()
    path = os.path.join(test_class.dir.name, "matmul.sock")
    test_class.target = "unix:" + path
    listen = test_class.target
    port = None
    if tcp:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        test_class.remote = f"127.0.0.1:{port}"
        listen += "," + test_class.remote
    test_class.log = open(os.path.join(test_class.dir.name, "server.log"),
                          "w")
    test_class.server = subprocess.Popen(
        [server, "--backend=cpu", "--listen=" + listen, "--metrics_listen="],
        stdout=test_class.log, stderr=subprocess.STDOUT)
    # The unix socket is bound before the daemon starts serving, the TCP
    # port only once it does: wait for both (a slow start, under a
    # sanitizer say, must not look like a refused connection).
    deadline = time.monotonic() + 60
    while not (os.path.exists(path) and (port is None or _accepts(port))):
        if test_class.server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("matmul-server did not start")
        time.sleep(0.05)


def stop_cpu_daemon(test_class):
    matmul_client.close_default_clients()
    test_class.server.terminate()
    test_class.server.wait(timeout=60)
    test_class.log.close()
    test_class.dir.cleanup()


def _accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
