"""The scratch pool (one shm region per host product in flight), on fake
segments: no daemon needed.

    python3 -m unittest discover -s client/python/tests -p 'test_scratch*'
"""

import os
import sys
import unittest

# The source tree's package, unless the test is of the installed one
# (install_test.sh).
if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from matmul_client._scratch_pool import _ScratchPool  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20


class FakeSegment:
    def __init__(self, size):
        self.size = size
        self.closed = False

    def close(self):
        self.closed = True


class ScratchPoolTest(unittest.TestCase):
    def setUp(self):
        self.made, self.unregistered = [], []

        def new_segment(size):
            segment = FakeSegment(size)
            self.made.append(segment)
            return segment, f"r{len(self.made)}"

        self.pool = _ScratchPool(new_segment, self.unregistered.append,
                                 keep=2, keep_bytes=4 * MiB)

    def test_one_region_per_product_in_flight_then_reuse(self):
        first = self.pool.acquire(100)
        second = self.pool.acquire(100)
        self.assertIsNot(first[0], second[0])
        self.assertEqual(first[0].size, 64 * KiB)  # the smallest size
        self.pool.release(first)
        self.assertIs(self.pool.acquire(10 * KiB)[0], first[0])
        self.assertEqual(len(self.made), 2)
        # Too small for what is asked: a new one, grown to a power of two.
        self.pool.release(second)
        big = self.pool.acquire(3 * MiB)
        self.assertEqual(big[0].size, 4 * MiB)
        self.assertEqual(len(self.made), 3)

    def test_idle_regions_are_bounded_in_count_and_bytes(self):
        held = [self.pool.acquire(100) for _ in range(3)]
        for scratch in held:
            self.pool.release(scratch)
        # Three idle, two kept: the surplus goes at the next acquire().
        self.assertEqual(self.unregistered, [])
        self.pool.acquire(100)
        self.assertEqual(self.unregistered, ["r1"])
        self.assertTrue(self.made[0].closed)
        # Two of 4 MiB are over keep_bytes: the largest one stays.
        large = [self.pool.acquire(4 * MiB) for _ in range(2)]
        for scratch in large:
            self.pool.release(scratch)
        kept = [segment.size for segment, _ in self.pool._idle]
        self.assertEqual(kept, [4 * MiB])
        self.pool.acquire(8 * MiB)
        self.assertEqual(self.unregistered, ["r1", "r3", "r4"])

    def test_close_returns_every_segment(self):
        busy = self.pool.acquire(100)
        idle = self.pool.acquire(100)
        self.pool.release(idle)
        self.assertCountEqual(self.pool.close(), [busy[0], idle[0]])


if __name__ == "__main__":
    unittest.main()
