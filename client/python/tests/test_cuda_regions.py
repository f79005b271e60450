"""How the client turns CUDA tensors into regions, without a GPU, torch or a
daemon: the parser of torch's _share_cuda_() handles on fabricated bytes (the
layouts are documented in matmul_client/_share_handles.py), and the
client's region requests and caches against a fake torch and a fake
RegisterRegion.

    python3 -m unittest discover -s client/python/tests -p 'test_cuda*'
"""

import os
import sys
import types
import unittest
from unittest import mock

# The source tree's package, unless the test is of the installed one
# (install_test.sh).
if not os.environ.get("MATMUL_CLIENT_TEST_INSTALLED"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from fake_torch import FakeStorage, FakeTensor, fake_torch  # noqa: E402

import matmul_client  # noqa: E402
from matmul_client import _client, _cuda_product, _cuda_regions  # noqa: E402
from matmul_client._share_handles import (  # noqa: E402
    CudaIpcHandle,
    ExpandableSegmentHandle,
    parse_share_handle,
)

IPC = bytes(range(64))
MiB = 1 << 20


def i32(value):
    return value.to_bytes(4, sys.byteorder, signed=True)


def u64(value):
    return value.to_bytes(8, sys.byteorder)


def expandable(fds, chunk_bytes=20 * MiB, pid=4242, version=2,
               handle_type=1, count=None, padding=b"\xa5" * 4):
    """An 'e' handle as torch writes it: [version]['e'] ShareHeader fds.
    The padding after pid is not zeroed by every torch, hence 0xa5."""
    header = i32(pid) + padding + u64(chunk_bytes) + u64(
        len(fds) if count is None else count)
    if version >= 3:
        header += i32(handle_type) + padding
    return bytes([version]) + b"e" + header + b"".join(i32(fd) for fd in fds)


class ParseShareHandleTest(unittest.TestCase):
    def test_legacy_and_cuda_malloc_handles(self):
        self.assertEqual(parse_share_handle(IPC), CudaIpcHandle(IPC))
        for version in (1, 2, 3):
            self.assertEqual(parse_share_handle(bytes([version]) + b"c" + IPC),
                             CudaIpcHandle(IPC))
        # bytearray / memoryview work like bytes.
        self.assertEqual(parse_share_handle(bytearray(b"\x02c" + IPC)),
                         CudaIpcHandle(IPC))

    def test_expandable_segment_of_one_chunk(self):
        parsed = parse_share_handle(expandable([17], chunk_bytes=2 * MiB))
        self.assertIsInstance(parsed, ExpandableSegmentHandle)
        self.assertEqual(parsed, ExpandableSegmentHandle(4242, 2 * MiB, (17,)))
        self.assertEqual(parsed.size_bytes, 2 * MiB)

    def test_expandable_segment_of_three_chunks_in_every_version(self):
        for version in (1, 2, 3):
            with self.subTest(version=version):
                parsed = parse_share_handle(
                    expandable([9, 12, 10], version=version))
                self.assertEqual(parsed.pid, 4242)
                self.assertEqual(parsed.chunk_bytes, 20 * MiB)
                self.assertEqual(parsed.fds, (9, 12, 10))
                self.assertEqual(parsed.size_bytes, 60 * MiB)

    def test_header_layouts_are_exact(self):
        # Version 2: 2 + 24 header bytes + 4 per fd; version 3: 2 + 32 + 4.
        self.assertEqual(len(expandable([5, 6], version=2)), 2 + 24 + 8)
        self.assertEqual(len(expandable([5, 6], version=3)), 2 + 32 + 8)
        # Version 3 with an unspecified handle type means POSIX fds.
        self.assertEqual(
            parse_share_handle(expandable([5], version=3, handle_type=0)).fds,
            (5,))

    def test_padding_is_ignored(self):
        zeroed = parse_share_handle(expandable([3, 4], padding=b"\0" * 4))
        dirty = parse_share_handle(expandable([3, 4], padding=b"\xff" * 4))
        self.assertEqual(zeroed, dirty)

    def test_fabric_handles_are_refused_with_the_fix(self):
        fabric_v3 = expandable([], version=3, handle_type=2, count=2) + \
            b"\x11" * 128
        fabric_v2 = expandable([], version=2, count=2) + b"\x11" * 128
        for handle in (fabric_v3, fabric_v2):
            with self.assertRaisesRegex(NotImplementedError,
                                        "fabric handles.*POSIX"):
                parse_share_handle(handle)

    def assert_malformed(self, handle, message):
        with self.assertRaisesRegex(ValueError, message):
            parse_share_handle(handle)

    def test_truncated_handles(self):
        whole = expandable([9, 12, 10])
        self.assert_malformed(b"", "handle of 0 bytes")
        self.assert_malformed(b"\x02", "handle of 1 bytes")
        self.assert_malformed(b"\x02e", "truncated: 0 bytes")
        self.assert_malformed(whole[:20], "truncated: 18 bytes .* 24-byte")
        self.assert_malformed(expandable([1], version=3)[:30],
                              "truncated: 28 bytes .* 32-byte")
        self.assert_malformed(whole[:-1], "announces 3 chunk.* carries 11")
        self.assert_malformed(whole + b"\0", "announces 3 chunk.* carries 13")
        self.assert_malformed(b"\x02c" + IPC[:63], "expected 66")
        self.assert_malformed(b"\x02c" + IPC + b"\0", "expected 66")

    def test_garbage_handles(self):
        self.assert_malformed(b"\x02x" + IPC, "type byte 0x78")
        self.assert_malformed(IPC[:40], "type byte")
        self.assert_malformed(expandable([3], version=9), "version 9")
        self.assert_malformed(expandable([3], version=0), "version 0")
        self.assert_malformed(expandable([], count=0), "num_handles 0")
        self.assert_malformed(expandable([3], count=1 << 40), "garbled")
        self.assert_malformed(expandable([3], pid=0), "pid 0")
        self.assert_malformed(expandable([3], pid=-7), "pid -7")
        self.assert_malformed(expandable([3], chunk_bytes=0),
                              "segment_size 0")
        self.assert_malformed(expandable([3], version=3, handle_type=7),
                              "handle_type 7")
        self.assert_malformed(expandable([3, -1]), "negative fd")


# --- the client, against a fake torch ------------------------------------


class ClientCudaRegionsTest(unittest.TestCase):
    def setUp(self):
        self.torch = fake_torch()
        patcher = mock.patch.dict(sys.modules, {"torch": self.torch})
        patcher.start()
        self.addCleanup(patcher.stop)
        self.client = matmul_client.Client("unix:/nonexistent/matmul.sock")
        self.addCleanup(self.client.close)
        self.registered, self.unregistered = [], []
        self.client.register_region = self.fake_register
        self.client.unregister_region = self.unregistered.append
        self.ptracer = mock.patch.object(_cuda_regions,
                                         "_let_the_daemon_take_fds")
        self.let_ptrace = self.ptracer.start()
        self.addCleanup(self.ptracer.stop)
        # address -> the driver's buffer id there; None: the driver does
        # not say (as without the native extension).
        self.buffer_ids = {}
        self.client._cuda_buffer_id = self.buffer_ids.get
        self.now = 1000.0
        clock = mock.patch.object(_cuda_regions.time, "monotonic",
                                  lambda: self.now)
        clock.start()
        self.addCleanup(clock.stop)

    def fake_register(self, request):
        self.registered.append(request)
        return _client.pb.RegisterRegionResponse(
            region_id=f"r{len(self.registered)}")

    def ref(self, tensor):
        """As the client prepares a product with this tensor."""
        self.client._check_freed_cuda_memory({tensor.get_device()})
        return self.client._cuda_ref(types.SimpleNamespace(value=tensor))

    def answer_the_product(self):
        """As the product prepared last is answered: the regions retired
        while it was prepared are unregistered."""
        retired, self.client._retired = self.client._retired, []
        _cuda_product._CudaProduct(None, None, None, retired,
                                   self.client._retired_done).release()
        self.client._unregister_retired()

    def test_an_expandable_segment_becomes_one_chunked_vmm_region(self):
        handle = expandable([21, 22, 23], pid=os.getpid(), version=3)
        # The storage starts 5 MiB into the first of three 20-MiB chunks.
        storage = FakeStorage(self.torch, 0x7000_0000_0000, 50 * MiB, handle,
                              5 * MiB)
        self.assertEqual(self.ref(FakeTensor(storage, element_offset=8)),
                         ("r1", 5 * MiB + 16))
        (request,) = self.registered
        vmm = request.cuda_vmm
        self.assertEqual(request.WhichOneof("kind"), "cuda_vmm")
        self.assertEqual(vmm.pid, os.getpid())
        self.assertEqual(vmm.fd, 0)
        self.assertEqual(list(vmm.chunk_fds), [21, 22, 23])
        self.assertEqual(vmm.chunk_bytes, 20 * MiB)
        self.assertEqual(vmm.size_bytes, 60 * MiB)
        self.assertEqual(vmm.device_ordinal, 0)
        self.assertEqual(vmm.device_uuid,
                         "GPU-1234abcd-0000-0000-0000-000000000000")
        self.let_ptrace.assert_called_once()
        # torch's IPC ref count was dropped again.
        self.assertEqual(self.torch.released, [(b"refcount", 8)])

    def test_storages_and_chunks_are_registered_once(self):
        handle = expandable([21, 22], pid=os.getpid())
        first = FakeStorage(self.torch, 0x7000_0000_0000, 4 * MiB, handle, 0)
        self.assertEqual(self.ref(FakeTensor(first)), ("r1", 0))
        # The same storage again: neither shared nor registered again.
        self.assertEqual(self.ref(FakeTensor(first, 4)), ("r1", 8))
        self.assertEqual(self.torch.shares, 1)
        # Another storage in the same chunks: shared, but the region is
        # reused (the key is the chunks, not the handle's bytes).
        second = FakeStorage(self.torch, 0x7000_0040_0000, 8 * MiB,
                             expandable([21, 22], pid=os.getpid(),
                                        padding=b"\0" * 4), 4 * MiB)
        self.assertEqual(self.ref(FakeTensor(second)), ("r1", 4 * MiB))
        self.assertEqual(self.torch.shares, 2)
        self.assertEqual(len(self.registered), 1)
        # Other chunks: another region.
        third = FakeStorage(self.torch, 0x7000_0280_0000, MiB,
                            expandable([24], pid=os.getpid()), 0)
        self.assertEqual(self.ref(FakeTensor(third)), ("r2", 0))
        self.assertEqual(self.unregistered, [])

    def test_memory_given_back_to_the_driver_drops_the_caches(self):
        handle = expandable([21], pid=os.getpid())
        storage = FakeStorage(self.torch, 0x7000_0000_0000, MiB, handle, 0)
        self.assertEqual(self.ref(FakeTensor(storage)), ("r1", 0))
        # torch unmapped chunks (empty_cache, OOM retry): fd 21 and this
        # address may now be other memory.
        self.torch.freed += 20 * MiB
        self.assertEqual(self.ref(FakeTensor(storage)), ("r2", 0))
        self.assertEqual(self.unregistered, ["r1"])
        self.assertEqual(self.torch.shares, 2)
        # Nothing freed since: cached.
        self.assertEqual(self.ref(FakeTensor(storage)), ("r2", 0))
        self.assertEqual(len(self.registered), 2)

    def test_cuda_malloc_blocks_stay_cuda_ipc_regions(self):
        block = FakeStorage(self.torch, 0x7100_0000_0000, MiB,
                            b"\x02c" + IPC, 0)
        self.assertEqual(self.ref(FakeTensor(block)), ("r1", 0))
        (request,) = self.registered
        self.assertEqual(request.cuda_ipc.handle, IPC)
        self.assertEqual(request.cuda_ipc.size_bytes, MiB)
        self.let_ptrace.assert_not_called()
        # A later storage further into the block outgrows the region: the
        # larger one replaces it, but the old one stays registered until
        # the product being prepared (whose A may name it) is answered.
        later = FakeStorage(self.torch, 0x7100_0010_0000, MiB,
                            b"\x02c" + IPC, MiB)
        self.assertEqual(self.ref(FakeTensor(later)), ("r2", MiB))
        self.assertEqual(self.registered[1].cuda_ipc.size_bytes, 2 * MiB)
        self.assertEqual(self.unregistered, [])
        # The product takes the stale ids along; its answer hands them back.
        self.assertEqual(self.client._retired, ["r1"])
        self.answer_the_product()
        self.assertEqual(self.unregistered, ["r1"])
        # The first storage now goes through the larger region.
        self.assertEqual(self.ref(FakeTensor(block)), ("r2", 0))
        self.assertEqual(len(self.registered), 2)

    def test_another_allocation_at_a_cached_address_is_registered_anew(self):
        address = 0x7100_0000_0000
        self.buffer_ids[address] = 11
        block = FakeStorage(self.torch, address, MiB, b"\x02c" + IPC, 0)
        self.assertEqual(self.ref(FakeTensor(block)), ("r1", 0))
        self.assertEqual(self.ref(FakeTensor(block, 8)), ("r1", 16))
        self.assertEqual(self.torch.shares, 1)
        # torch gave the block back and cudaMalloc put a new one at the
        # same address (another buffer id and IPC handle), with no time for
        # the freed-bytes count to be looked at again.
        self.buffer_ids[address] = 12
        block = FakeStorage(self.torch, address, MiB,
                            b"\x02c" + bytes(reversed(IPC)), 0)
        self.assertEqual(self.ref(FakeTensor(block)), ("r2", 0))
        self.assertEqual(self.torch.shares, 2)
        self.assertEqual(self.registered[1].cuda_ipc.handle,
                         bytes(reversed(IPC)))
        # The old region is unregistered once the product is answered.
        self.assertEqual(self.unregistered, [])
        self.answer_the_product()
        self.assertEqual(self.unregistered, ["r1"])
        # The new one is cached under the new id.
        self.assertEqual(self.ref(FakeTensor(block, 4)), ("r2", 8))
        self.assertEqual(self.torch.shares, 2)

    def test_freed_bytes_are_looked_at_rarely_where_buffer_ids_vouch(self):
        address = 0x7100_0000_0000
        self.buffer_ids[address] = 11
        block = FakeStorage(self.torch, address, MiB, b"\x02c" + IPC, 0)
        for _ in range(50):
            self.assertEqual(self.ref(FakeTensor(block)), ("r1", 0))
            self.now += 0.001
        self.assertEqual(self.torch.freed_looks, 1)
        self.now += _cuda_regions._CudaRegions._FREED_CHECK_SECONDS
        self.ref(FakeTensor(block))
        self.assertEqual(self.torch.freed_looks, 2)
        # Memory given back since: at the next look (not before), every
        # region of the device is forgotten, which unregisters what the
        # daemon still holds.
        self.torch.freed += MiB
        self.assertEqual(self.ref(FakeTensor(block)), ("r1", 0))
        self.assertEqual(self.unregistered, [])
        self.now += _cuda_regions._CudaRegions._FREED_CHECK_SECONDS
        self.assertEqual(self.ref(FakeTensor(block)), ("r2", 0))
        self.assertEqual(self.unregistered, ["r1"])
        self.assertEqual(self.torch.freed_looks, 3)

    def test_freed_bytes_are_looked_at_on_every_product_without_ids(self):
        # Expandable-segment chunks: buffer ids do not vouch for them.
        chunks = FakeStorage(self.torch, 0x7000_0000_0000, MiB,
                             expandable([21], pid=os.getpid()), 0)
        self.buffer_ids[0x7000_0000_0000] = 5
        for _ in range(3):
            self.ref(FakeTensor(chunks))
        self.assertEqual(self.torch.freed_looks, 3)
        self.assertEqual(self.client._cuda_unidentified, {0})
        # Forgetting them ends that.
        self.client.release_cuda_regions()
        self.assertEqual(self.client._cuda_unidentified, set())
        # A cudaMalloc block for which the driver gives no id (as without
        # the native extension): every product too.
        block = FakeStorage(self.torch, 0x7100_0000_0000, MiB,
                            b"\x02c" + IPC, 0)
        self.ref(FakeTensor(block))
        looks = self.torch.freed_looks
        for _ in range(3):
            self.ref(FakeTensor(block))
        self.assertEqual(self.torch.freed_looks, looks + 3)

    def test_release_cuda_regions(self):
        self.ref(FakeTensor(FakeStorage(self.torch, 1 << 40, MiB,
                                        expandable([5]), 0)))
        self.ref(FakeTensor(FakeStorage(self.torch, 2 << 40, MiB,
                                        b"\x02c" + IPC, 0)))
        self.client.release_cuda_regions()
        self.assertEqual(sorted(self.unregistered), ["r1", "r2"])
        self.assertEqual(self.client._cuda_storages, {})

    def test_a_bad_handle_registers_nothing(self):
        storage = FakeStorage(self.torch, 1 << 40, MiB,
                              expandable([5])[:-2], 0)
        with self.assertRaisesRegex(ValueError, "announces 1 chunk"):
            self.ref(FakeTensor(storage))
        # A storage that would end past the shared chunks.
        storage = FakeStorage(self.torch, 2 << 40, 30 * MiB,
                              expandable([5]), 0)
        with self.assertRaisesRegex(ValueError, "ends at byte"):
            self.ref(FakeTensor(storage))
        self.assertEqual(self.registered, [])


if __name__ == "__main__":
    unittest.main()
