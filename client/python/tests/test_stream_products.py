"""Client.matmul's stream-ordered CUDA products without a GPU: a stand-in
torch (fake_torch.py) and a stand-in for the native ring's stream calls,
which records what the client queues and answers when the test says. What
is checked: the product the ring gets (regions, offsets, shapes, strides,
dtypes, options) and the stream it is queued on; errors raise at the
client's next call, first in send order, among matmul_async futures too;
regions retired while preparing a product are unregistered only once it is
answered; synchronize() and close() wait for the queued products; a
driver that cannot order products sends the client down the synchronizing
path with a warning.

    python3 -m unittest discover -s client/python/tests -p 'test_stream*'
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
    FakeStorage,
    FakeTensor,
    fake_torch,
)

import matmul_client  # noqa: E402
from matmul_client import MatmulError  # noqa: E402
from matmul_client._proto import matmul_pb2 as pb  # noqa: E402

IPC = bytes(range(64))
MiB = 1 << 20
BF16, FP32 = pb.DTYPE_BF16, pb.DTYPE_FP32


def error(details, code=grpc.StatusCode.INVALID_ARGUMENT):
    return MatmulError(code, details)


class FakeStreamRing:
    """What the client uses of _RingProducts, with the ticket bookkeeping
    of the native Ring (CallTickets): products wait for answer()."""

    name = "ring"

    def __init__(self):
        self.queued = []  # (ticket, spec, stream, timeout, number)
        self.async_calls = []  # (spec, stream, done)
        self.unanswered = set()
        self.failures = []  # (ticket, number, error)
        self.waits = 0
        self.refuse = None  # a MatmulError queue_on_stream raises
        self.sync_calls = []

    def queue_on_stream(self, product, stream, timeout, number):
        if self.refuse is not None:
            raise self.refuse
        ticket = len(self.queued) + 1
        self.queued.append((ticket, product, stream, timeout, number))
        self.unanswered.add(ticket)
        return ticket

    def answer(self, ticket, failure=None):
        self.unanswered.discard(ticket)
        if failure is not None:
            number = self.queued[ticket - 1][4]
            self.failures.append((ticket, number, failure))

    def answered_through(self):
        return min(self.unanswered, default=len(self.queued) + 1)

    def stream_failures(self):
        failures, self.failures = sorted(self.failures), []
        return [(number, error) for _, number, error in failures]

    def wait_stream_calls(self):
        # The daemon answers everything queued (with what answer() set).
        self.waits += 1
        for ticket in list(self.unanswered):
            self.answer(ticket)

    def call_on_stream(self, product, stream, timeout, done):
        if self.refuse is not None:
            raise self.refuse
        self.async_calls.append((product, stream, done))

    def call(self, request, timeout):
        self.sync_calls.append(request)
        return pb.MatmulResponse()

    def close(self):
        pass


class StreamProductsTest(unittest.TestCase):
    def setUp(self):
        self.torch = fake_torch()
        patcher = mock.patch.dict(sys.modules, {"torch": self.torch})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.client = matmul_client.Client("unix:/nonexistent/matmul.sock")
        self.ring = FakeStreamRing()
        # As once the native session is open.
        self.client._session_id = "session-1"
        self.client._products = self.ring
        self.client._native = None  # no buffer ids: looked up per product
        self.registered, self.unregistered = [], []
        self.client.register_region = self.fake_register
        self.client.unregister_region = self.unregistered.append
        self.addCleanup(self.client.close)
        self.x = self.tensor(0x7100_0000_0000, (16, 64))
        self.w = self.tensor(0x7200_0000_0000, (32, 64))

    def fake_register(self, request):
        self.registered.append(request)
        return pb.RegisterRegionResponse(
            region_id=f"r{len(self.registered)}")

    def tensor(self, address, shape, dtype=None, handle=None, **kwargs):
        size = 4 * shape[0] * shape[1]
        storage = FakeStorage(self.torch, address, size,
                              handle or b"\x02c" + address.to_bytes(8, "big")
                              * 8, 0)
        if dtype is not None:
            kwargs["dtype"] = dtype
        return FakeTensor(storage, shape=shape, **kwargs)

    def test_the_ring_gets_the_product_and_the_current_stream(self):
        out = self.tensor(0x7300_0000_0000, (16, 32), dtype=FLOAT32)
        self.assertIs(self.client.matmul(self.x, self.w, out=out,
                                         transpose_b=True, alpha=2.0,
                                         beta=0.5, timeout=7.0), out)
        ((ticket, spec, stream, timeout, number),) = self.ring.queued
        self.assertEqual((ticket, stream, timeout), (1, 0x5100, 7.0))
        self.assertEqual(spec, (
            ("r1", 0, (16, 64), (64, 1), BF16),
            ("r2", 0, (32, 64), (64, 1), BF16),
            ("r3", 0, (16, 32), (32, 1), FP32),
            False, True, 2.0, 0.5, FP32))
        # A new out on the inputs' device, and a stream named by keyword;
        # the registered regions are reused.
        side = mock.Mock(cuda_stream=0x5A5A)
        y = self.client.matmul(self.x, self.w, transpose_b=True,
                               stream=side)
        self.assertEqual(y.shape, (16, 32))
        (_, spec, stream, timeout, second) = self.ring.queued[1]
        self.assertEqual(stream, 0x5A5A)
        self.assertEqual(timeout, self.client.timeout)
        self.assertEqual(spec[:2], (("r1", 0, (16, 64), (64, 1), BF16),
                                    ("r2", 0, (32, 64), (64, 1), BF16)))
        self.assertEqual(spec[2][0], "r4")
        self.assertEqual(spec[3:], (False, True, 1.0, 0.0, BF16))
        self.assertGreater(second, number)
        self.assertEqual(len(self.registered), 4)
        self.assertEqual(self.torch.synchronized, 0)
        self.assertEqual(self.ring.sync_calls, [])

    def test_the_request_message_says_the_same_as_the_spec(self):
        # Strided (transposed) a: its strides are in the request.
        a = self.tensor(0x7400_0000_0000, (64, 16), strides=(1, 64))
        product = self.client._prepare(a, self.w, None, True, False, 1.0,
                                       0.0, "fp32")
        request = product.request
        self.assertEqual(request.session_id, "session-1")
        self.assertEqual(list(request.a.shape), [64, 16])
        self.assertEqual(list(request.a.strides), [1, 64])
        self.assertEqual(list(request.b.strides), [])  # contiguous
        self.assertEqual(request.c.region.region_id, product.spec[2][0])
        self.assertTrue(request.transpose_b)
        self.assertEqual(request.out_dtype, FP32)
        product.release()

    def test_errors_raise_at_the_next_call_first_in_send_order(self):
        for _ in range(4):
            self.client.matmul(self.x, self.w, transpose_b=True)
        self.ring.answer(1)
        self.ring.answer(4, error("fourth"))
        self.ring.answer(2, error("second"))
        self.ring.answer(3)
        with self.assertRaises(MatmulError) as caught:
            self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(caught.exception.details, "second")
        if hasattr(BaseException, "add_note"):  # Python 3.11+
            self.assertIn("1 more product(s)",
                          caught.exception.__notes__[0])
        # Reported with it: neither raises again.
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.client.synchronize()

    def test_synchronize_waits_and_orders_futures_and_stream_products(self):
        self.client.matmul(self.x, self.w, transpose_b=True)  # number n
        future = self.client.matmul_async(self.x, self.w, transpose_b=True)
        self.client.matmul(self.x, self.w, transpose_b=True)
        ((_, _, done),) = self.ring.async_calls
        done(None, error("async"))  # its future is never asked
        self.ring.answer(2, error("stream, after the async one"))
        with self.assertRaises(MatmulError) as caught:
            self.client.synchronize()
        self.assertEqual(caught.exception.details, "async")
        self.assertEqual(self.ring.waits, 1)
        self.assertEqual(self.ring.unanswered, set())
        self.assertTrue(future.done())
        self.client.synchronize()  # reported already

    def test_a_failed_stream_product_raises_from_synchronize(self):
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.ring.answer(1, error("late", grpc.StatusCode.DEADLINE_EXCEEDED))
        with self.assertRaises(MatmulError) as caught:
            self.client.synchronize()
        self.assertEqual(caught.exception.code,
                         grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_retired_regions_wait_for_the_answer(self):
        # x's block is registered for its first 2 KiB; a storage further
        # into the same block outgrows that region, which the product being
        # prepared retires.
        first = self.tensor(0x7500_0000_0000, (16, 16), handle=b"\x02c" + IPC)
        self.client.matmul(first, self.w, transpose_b=False,
                           out=self.tensor(0x7300_0000_0000, (16, 64)))
        later = FakeTensor(FakeStorage(self.torch, 0x7500_0001_0000, MiB,
                                       b"\x02c" + IPC, 0x1_0000),
                           shape=(16, 16))
        self.client.matmul(later, self.w, transpose_b=False,
                           out=self.tensor(0x7300_0000_0000, (16, 64)))
        self.assertEqual(self.unregistered, [])
        # Answering the first product releases nothing: the region is
        # retired with the second.
        self.ring.answer(1)
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(self.unregistered, [])
        self.ring.answer(2)
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(self.unregistered, ["r1"])

    def test_synchronize_releases_retired_regions(self):
        first = self.tensor(0x7500_0000_0000, (16, 16), handle=b"\x02c" + IPC)
        self.client.matmul(first, self.w)
        later = FakeTensor(FakeStorage(self.torch, 0x7500_0001_0000, MiB,
                                       b"\x02c" + IPC, 0x1_0000),
                           shape=(16, 16))
        self.client.matmul(later, self.w)
        self.assertEqual(self.unregistered, [])
        self.client.synchronize()
        self.assertEqual(self.unregistered, ["r1"])

    def test_close_waits_for_the_stream_products(self):
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.client.close()
        self.assertEqual(self.ring.waits, 1)
        self.assertEqual(self.ring.unanswered, set())

    def test_a_driver_that_cannot_order_products_synchronizes_instead(self):
        self.ring.refuse = error("no CUDA driver",
                                 grpc.StatusCode.FAILED_PRECONDITION)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertIn("no CUDA driver", str(caught[0].message))
        self.assertEqual(self.torch.synchronized, 1)
        (request,) = self.ring.sync_calls
        self.assertEqual(request.a.region.region_id, "r1")
        self.assertFalse(request.HasField("stream_order"))
        # From then on without trying.
        self.ring.refuse = AssertionError("queued again")
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(len(self.ring.sync_calls), 2)

    def test_other_errors_before_sending_raise_at_once(self):
        self.ring.refuse = error("every word pair in use",
                                 grpc.StatusCode.DEADLINE_EXCEEDED)
        with self.assertRaises(MatmulError):
            self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(self.ring.sync_calls, [])
        self.ring.refuse = None
        self.client.matmul(self.x, self.w, transpose_b=True)
        self.assertEqual(len(self.ring.queued), 1)

    def test_bad_operands_raise_value_errors_before_anything_is_sent(self):
        host = matmul_client.HostTensor(bytes(2 * 16 * 64), (16, 64))
        with self.assertRaisesRegex(ValueError, "all be CUDA tensors"):
            self.client.matmul(host, self.w, transpose_b=True)
        with self.assertRaisesRegex(ValueError, "rank 1"):
            self.client.matmul(FakeTensor(self.x.storage, shape=(16,)),
                               self.w)
        self.assertEqual(self.ring.queued, [])


if __name__ == "__main__":
    unittest.main()
