"""The native fast path of stream-ordered CUDA products
(matmul_client._native.CudaFastPath, native/cuda_fast_path.h), without a
GPU or a daemon: a stand-in torch (fake_torch.py) and a stand-in ring that
records what each path queues. What is checked: after the first product
(the Python path, which registers the regions) the same calls go the fast
way and queue byte for byte the request the Python path queues, on the same
stream, with the same timeout and ever larger numbers; whatever is not the
common case goes the Python way, with its errors and messages: a storage not
cached, another buffer id at a cached address, a device whose freed-bytes
check is due or that has storages without buffer ids, a tensor past its
cached region, operands on two devices, stream failures waiting to raise,
bad operands and options; a driver that cannot order products turns the
fast path off with the Python path's warning.

Needs the extension (install_test.sh runs it with the installed package);
skipped without it.

    python3 -m unittest discover -s client/python/tests -p 'test_cuda_fast*'
"""

import os
import sys
import unittest
import warnings
from unittest import mock

if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import grpc  # noqa: E402
from fake_torch import (  # noqa: E402
    FLOAT32,
    FakeDtype,
    FakeStorage,
    FakeTensor,
    fake_torch,
)

import matmul_client  # noqa: E402
from matmul_client import MatmulError  # noqa: E402
from matmul_client._proto import matmul_pb2 as pb  # noqa: E402

MiB = 1 << 20
SESSION = "session-1"


class RecordingRing:
    """The ring as both paths use it: the Python path's queue_on_stream
    (its spec built into a request by the extension's product_request, as
    the native Ring builds it) and the fast path's queue_request_on_stream
    record (path, serialized request, stream, timeout, number)."""

    name = "ring"

    def __init__(self, native):
        self._native = native
        self.queued = []
        self.failures = []  # (number, MatmulError) for stream_failures
        self.refuse = None  # a MatmulError both queue calls raise
        self.sync_calls = []

    @property
    def stream_queue(self):
        return self

    def queue_on_stream(self, spec, stream, timeout, number):
        if self.refuse is not None:
            raise self.refuse
        self.queued.append(("python", self._native.product_request(
            spec, SESSION), stream, timeout, number))
        return len(self.queued)

    def queue_request_on_stream(self, request, stream, timeout, number):
        if self.refuse is not None:
            raise self.refuse
        self.queued.append(("native", request, stream, timeout, number))
        return len(self.queued)

    def has_stream_failures(self):
        return bool(self.failures)

    def stream_failures(self):
        failures, self.failures = self.failures, []
        return failures

    def answered_through(self):
        return len(self.queued) + 1

    def call_on_stream(self, spec, stream, timeout, done):
        raise AssertionError("no matmul_async here")

    def call(self, request, timeout):
        self.sync_calls.append(request)
        return pb.MatmulResponse()

    def wait_stream_calls(self):
        pass

    def close(self):
        pass


class CudaFastPathTest(unittest.TestCase):
    def setUp(self):
        self.torch = fake_torch()
        patcher = mock.patch.dict(sys.modules, {"torch": self.torch})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.client = matmul_client.Client("unix:/nonexistent/matmul.sock")
        self.addCleanup(self.client.close)
        native = self.client._native
        if native is None or not hasattr(native, "CudaFastPath"):
            self.skipTest("matmul_client._native (with CudaFastPath) is not "
                          "built")
        self.native = native
        self.ring = RecordingRing(native)
        self.client._session_id = SESSION
        self.client._products = self.ring
        self.registered, self.unregistered = [], []
        self.client.register_region = self.fake_register
        self.client.unregister_region = self.unregistered.append
        # The driver's buffer ids (this machine has none): the fast path
        # asks the same function the cache was filled with.
        self.buffer_ids = {}
        self.client._cuda_buffer_id = \
            lambda address: self.buffer_ids.setdefault(address, 7)
        # Freed bytes looked at on the first product of a device only,
        # unless a test makes the look due.
        self.client._FREED_CHECK_SECONDS = 3600.0
        self.x = self.tensor(0x7100_0000_0000, (16, 64))
        self.w = self.tensor(0x7200_0000_0000, (32, 64))
        self.y = self.tensor(0x7300_0000_0000, (16, 32))

    def fake_register(self, request):
        self.registered.append(request)
        return pb.RegisterRegionResponse(
            region_id=f"r{len(self.registered)}")

    def tensor(self, address, shape, size=None, **kwargs):
        if size is None:
            size = 4
            for d in shape:
                size *= d
        storage = FakeStorage(self.torch, address, size,
                              b"\x02c" + address.to_bytes(8, "big") * 8, 0)
        return FakeTensor(storage, shape=shape, **kwargs)

    def counts(self):
        """(fast products, Python products) queued so far."""
        paths = [q[0] for q in self.ring.queued]
        return paths.count("native"), paths.count("python")

    def both_ways(self, *args, **kwargs):
        """The call through the fast path, then through the Python path;
        returns their queue records."""
        self.client.matmul(*args, **kwargs)
        fast = self.client._cuda_fast_matmul
        self.client._cuda_fast_matmul = False
        try:
            self.client.matmul(*args, **kwargs)
        finally:
            self.client._cuda_fast_matmul = fast
        return self.ring.queued[-2], self.ring.queued[-1]

    def assert_same_product(self, fast, python):
        self.assertEqual(fast[0], "native")
        self.assertEqual(python[0], "python")
        self.assertEqual(pb.MatmulRequest.FromString(fast[1]),
                         pb.MatmulRequest.FromString(python[1]))
        self.assertEqual(fast[1], python[1])  # byte for byte
        self.assertEqual(fast[2:4], python[2:4])  # stream, timeout
        self.assertLess(fast[4], python[4])  # numbers in send order

    def test_the_first_product_makes_the_fast_path_the_rest_take_it(self):
        self.assertIsNone(self.client._cuda_fast_matmul)
        out = self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertIs(out, self.y)
        self.assertEqual(self.counts(), (0, 1))
        self.assertTrue(self.client._cuda_fast_matmul)
        for _ in range(3):
            self.assertIs(self.client.matmul(self.x, self.w, out=self.y,
                                             transpose_b=True), self.y)
        self.assertEqual(self.counts(), (3, 1))
        fast_path = self.client._cuda_fast_path
        self.assertEqual((fast_path.hits, fast_path.misses), (3, 0))
        self.assertEqual(len(self.registered), 3)
        first = self.ring.queued[0]
        for record in self.ring.queued[1:]:
            self.assertEqual(record[1:4], first[1:4])
        numbers = [q[4] for q in self.ring.queued]
        self.assertEqual(numbers, sorted(set(numbers)))
        request = pb.MatmulRequest.FromString(first[1])
        self.assertEqual(request.session_id, SESSION)
        self.assertEqual(request.c.region.region_id, "r3")

    def test_a_cuda_list_is_one_stream_ordered_request(self):
        # The lora forward and a scratch read: one queue_on_stream of the
        # list's spec (built in C++), the same request as the package's
        # message, each storage registered once.
        a = self.tensor(0x7400_0000_0000, (4, 64))
        b = self.tensor(0x7500_0000_0000, (32, 4))
        xa = self.tensor(0x7600_0000_0000, (16, 4))
        t = matmul_client.Scratch(3, (16, 4))
        self.assertIsNone(self.client.matmul_list([
            (self.x, a, xa, False, True),
            (self.x, self.w, self.y, False, True, 1.0, 1.0),
            (xa, b, self.y, False, True, 2.0, 1.0),
            (self.x, a, matmul_client.Scratch.new((16, 4)), False, True),
            (t, b, self.y, False, True, 0.5, 1.0),
        ]))
        self.assertEqual(self.counts(), (0, 1))
        self.assertEqual(len(self.registered), 6)  # x, a, xa, w, y, b
        path, data, stream, _, _ = self.ring.queued[0]
        self.assertEqual(stream, self.torch.streams[0])
        request = pb.MatmulRequest.FromString(data)
        self.assertEqual(request.session_id, SESSION)
        self.assertEqual(len(request.products), 5)
        self.assertFalse(request.HasField("a"))
        self.assertEqual(request.products[0].c, request.products[2].a)
        self.assertEqual(request.products[3].c.scratch.product, 3)
        self.assertEqual(request.products[4].a.scratch.product, 3)
        self.assertEqual(request.products[4].alpha, 0.5)
        from matmul_client._product_list import list_request
        spec = self.client._prepare_cuda_list(
            [(self.x, a, xa, False, True, 1.0, 0.0)]).spec
        self.assertEqual(request.products[0],
                         list_request(SESSION, spec).products[0])
        self.assertEqual(self.torch.synchronized, 0)  # stream-ordered

    def test_the_same_request_as_the_python_path(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        side = mock.Mock(cuda_stream=0x5A5A)
        cases = [
            ((self.x, self.w), dict(out=self.y, transpose_b=True, alpha=2.0,
                                    beta=0.5, timeout=7)),
            ((self.x, self.w), dict(out=self.y, transpose_b=True,
                                    stream=side, timeout=None)),
            # A transposed view (strides in the request), out_dtype as the
            # out's own.
            ((FakeTensor(self.x.storage, shape=(64, 16), strides=(1, 64)),
              self.w), dict(out=self.y, transpose_a=True, transpose_b=True,
                            out_dtype=self.torch.bfloat16, alpha=3)),
            # An offset into the storage.
            ((FakeTensor(self.x.storage, element_offset=64, shape=(8, 64)),
              self.w), dict(out=FakeTensor(self.y.storage, element_offset=32,
                                           shape=(8, 32)),
                            transpose_b=True)),
        ]
        for args, kwargs in cases:
            with self.subTest(kwargs=kwargs):
                self.assert_same_product(*self.both_ways(*args, **kwargs))
        self.assertEqual(self.ring.queued[-1][2], 0x5100)
        self.assertEqual(self.ring.queued[3][2], 0x5A5A)
        self.assertEqual(self.ring.queued[1][3], 7.0)
        self.assertEqual(len(self.registered), 3)

    def test_batched_fp32_and_a_new_out(self):
        a = self.tensor(0x7400_0000_0000, (3, 16, 64))
        b = self.tensor(0x7500_0000_0000, (64, 32))
        out = self.tensor(0x7600_0000_0000, (3, 16, 32), dtype=FLOAT32)
        self.client.matmul(a, b, out=out)
        self.assert_same_product(*self.both_ways(a, b, out=out))
        # A new out: where the caching allocator puts it again, cached.
        at = self.torch.next_address
        first = self.client.matmul(a, b, out_dtype="fp32")
        self.assertEqual(self.counts()[1], 3)  # its block was new
        self.torch.next_address = at
        second = self.client.matmul(a, b, out_dtype=self.torch.float32)
        self.assertEqual(self.counts(), (2, 3))
        self.assertEqual((second.shape, second.dtype, second.device),
                         ((3, 16, 32), FLOAT32, "cuda:0"))
        self.assertEqual(second.data_ptr(), first.data_ptr())
        self.assertEqual(self.ring.queued[-1][1], self.ring.queued[-2][1])
        # A broadcast batch of b, out_dtype by number.
        b3 = FakeTensor(b.storage, shape=(3, 64, 32), strides=(0, 32, 1))
        self.torch.next_address = at
        self.client.matmul(a, b3, out_dtype=pb.DTYPE_FP32)
        self.assertEqual(self.counts(), (3, 3))
        request = pb.MatmulRequest.FromString(self.ring.queued[-1][1])
        self.assertEqual(list(request.b.strides), [0, 32, 1])
        self.assertEqual(list(request.c.shape), [3, 16, 32])

    def test_an_uncached_storage_takes_the_python_path(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        other = self.tensor(0x7700_0000_0000, (16, 64))
        self.client.matmul(other, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (0, 2))
        self.assertEqual(len(self.registered), 4)
        # Cached from then on.
        self.client.matmul(other, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 2))

    def test_another_buffer_id_at_a_cached_address_takes_the_python_path(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 1))
        # torch freed x's block and cudaMalloc put another there.
        self.buffer_ids[self.x.data_ptr()] = 8
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 2))
        fast_path = self.client._cuda_fast_path
        self.assertEqual((fast_path.hits, fast_path.misses), (1, 1))
        self.assertEqual(len(self.registered), 4)  # x again, as r4
        request = pb.MatmulRequest.FromString(self.ring.queued[-1][1])
        self.assertEqual(request.a.region.region_id, "r4")
        # The stale region goes once that product is answered, at the next
        # call (which the fast path takes, under the new id).
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (2, 2))
        self.assertEqual(self.unregistered, ["r1"])
        request = pb.MatmulRequest.FromString(self.ring.queued[-1][1])
        self.assertEqual(request.a.region.region_id, "r4")

    def test_a_due_freed_bytes_look_takes_the_python_path(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        looks = self.torch.freed_looks
        self.client._cuda_next_freed_check[0] = 0.0  # due
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (0, 2))
        self.assertEqual(self.torch.freed_looks, looks + 1)
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 2))
        # Memory given back since: the Python path's look drops the regions.
        self.torch.freed += MiB
        self.client._cuda_next_freed_check[0] = 0.0
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 3))
        self.assertEqual(sorted(self.unregistered), ["r1", "r2", "r3"])
        self.assertEqual(len(self.registered), 6)

    def test_storages_without_buffer_ids_take_the_python_path(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.buffer_ids[0x7700_0000_0000] = None  # the driver does not say
        other = self.tensor(0x7700_0000_0000, (16, 64))
        self.client.matmul(other, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.client._cuda_unidentified, {0})
        # Every product of the device now looks at the freed bytes.
        looks = self.torch.freed_looks
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (0, 3))
        self.assertEqual(self.torch.freed_looks, looks + 1)

    def test_past_the_cached_region_or_across_devices(self):
        small = self.tensor(0x7700_0000_0000, (16, 64), size=16 * 64 * 2)
        self.client.matmul(small, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (0, 1))
        # Its first 16 rows (2 KiB of BF16) are registered; 32 rows are not.
        beyond = FakeTensor(small.storage, shape=(32, 64))
        self.client.matmul(beyond, self.w, out=self.tensor(
            0x7800_0000_0000, (32, 32)), transpose_b=True)
        self.assertEqual(self.counts(), (0, 2))
        self.client.matmul(small, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 2))
        on_1 = self.tensor(0x7900_0000_0000, (32, 64), device=1)
        self.client.matmul(self.x, on_1, out=self.y, transpose_b=True)
        self.client.matmul(self.x, on_1, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 4))

    def test_stream_failures_raise_first(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.ring.failures = [(1, MatmulError(
            grpc.StatusCode.INVALID_ARGUMENT, "inner dimensions disagree"))]
        with self.assertRaisesRegex(MatmulError, "inner dimensions"):
            self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (0, 1))
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 1))

    def test_errors_are_the_python_paths(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        host = matmul_client.HostTensor(bytes(2 * 16 * 64), (16, 64))
        fp16 = FakeDtype("float16", 2)
        bad = [
            ((self.tensor(0x7A00_0000_0000, (16,)), self.w), {}),
            ((self.tensor(0x7A00_0000_0000, (16, 64), dtype=fp16), self.w),
             {}),
            ((FakeTensor(self.x.storage, shape=(16, 64), strides=(64, -1)),
              self.w), {}),
            ((self.x, self.w), dict(transpose_b=True, beta=1.0)),
            ((self.x, self.w), dict(out=self.y, transpose_b=True,
                                    out_dtype="fp32")),
            ((self.x, self.w), dict(out=self.y, transpose_b=True,
                                    out_dtype="fp64")),
            ((host, self.w), dict(transpose_b=True)),
            ((self.x, self.w), dict(out=host, transpose_b=True)),
            ((self.x, [1, 2]), {}),
        ]
        fast = self.client._cuda_fast_matmul
        for args, kwargs in bad:
            with self.subTest(args=args, kwargs=kwargs):
                raised = []
                for path in (fast, False):
                    self.client._cuda_fast_matmul = path
                    with self.assertRaises((ValueError, TypeError)) as caught:
                        self.client.matmul(*args, **kwargs)
                    raised.append((type(caught.exception),
                                   str(caught.exception)))
                self.assertEqual(raised[0], raised[1])
        self.client._cuda_fast_matmul = fast
        self.assertEqual(self.counts(), (0, 1))

    def test_options_the_fast_path_leaves_to_python(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        # Not plain bools, floats or dtypes: the Python path converts them
        # as it always did.
        for kwargs in (dict(transpose_b=1), dict(transpose_b=True,
                                                 alpha=True),
                       dict(transpose_b=True, timeout="5")):
            with self.subTest(kwargs=kwargs):
                before = self.counts()
                try:
                    self.client.matmul(self.x, self.w, out=self.y, **kwargs)
                except (TypeError, ValueError):
                    pass
                self.assertEqual(self.counts()[0], before[0])

    def test_a_driver_that_cannot_order_products_synchronizes_instead(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.ring.refuse = MatmulError(grpc.StatusCode.FAILED_PRECONDITION,
                                       "no CUDA driver")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        (warning,) = caught
        self.assertIn("no CUDA driver", str(warning.message))
        self.assertEqual(warning.filename, __file__)
        self.assertIs(self.client._cuda_fast_matmul, False)
        self.assertEqual(self.torch.synchronized, 1)
        self.assertEqual(len(self.ring.sync_calls), 1)

    def test_other_errors_before_sending_raise(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.ring.refuse = MatmulError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                       "every word pair in use")
        with self.assertRaisesRegex(MatmulError, "every word pair"):
            self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertTrue(self.client._cuda_fast_matmul)
        self.assertEqual(self.ring.sync_calls, [])
        self.ring.refuse = None
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 1))

    def test_a_closed_client_raises_as_before(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        fast = self.client._cuda_fast_matmul
        self.client.close()
        self.assertIs(self.client._cuda_fast_matmul, False)
        with self.assertRaisesRegex(ValueError, "the client is closed"):
            self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        # The builtin kept from before: nothing sent either.
        self.assertIsNone(fast(self.client, self.x, self.w, self.y, True,
                               False, 1.0, 0.0, None, None, None))
        self.assertEqual(self.counts(), (0, 1))

    def test_regions_retired_earlier_are_unregistered_after_a_fast_call(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.client._retired_done.append("r-old")
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        self.assertEqual(self.counts(), (1, 1))
        self.assertEqual(self.unregistered, ["r-old"])

    def test_bad_arguments_to_the_builtin(self):
        self.client.matmul(self.x, self.w, out=self.y, transpose_b=True)
        with self.assertRaisesRegex(TypeError, "11 arguments, got 2"):
            self.client._cuda_fast_matmul(self.client, self.x)
        with self.assertRaisesRegex(ValueError, "DTYPE_BF16 and DTYPE_FP32"):
            self.native.CudaFastPath(
                self.ring, SESSION, self.client._lock, iter(()),
                self.client._retired_done, self.client._retired_on_answer,
                len, self.torch.empty, {self.torch.bfloat16: 7})


if __name__ == "__main__":
    unittest.main()
