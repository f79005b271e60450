"""Scratch shm regions that host operands are copied through: one per
product in flight, so that many can be in flight at once, kept for reuse."""

import threading

_MIN_BYTES = 64 << 10


class _ScratchPool:
    """Registered shm segments handed out one per product. acquire() may
    register a new one (an RPC: call it where blocking is fine); release()
    never blocks, so answers can return segments from any thread. At most
    `keep` idle segments, of at most `keep_bytes` together (but always
    one), are kept; the rest are unregistered at the next acquire()."""

    def __init__(self, new_segment, unregister, keep, keep_bytes):
        self._new_segment = new_segment  # size -> (_SharedSegment, region id)
        self._unregister = unregister  # region id -> None
        self._keep = keep
        self._keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._idle = []  # [(segment, region id)], smallest first
        self._surplus = []  # idle ones beyond `keep`, to unregister
        self._busy = {}  # region id -> segment, handed out

    def acquire(self, size):
        """(segment, region id) of at least `size` bytes, for one product."""
        with self._lock:
            surplus, self._surplus = self._surplus, []
            for i, (segment, region_id) in enumerate(self._idle):
                if segment.size >= size:
                    del self._idle[i]
                    self._busy[region_id] = segment
                    found = segment, region_id
                    break
            else:
                found = None
        self._drop(surplus)
        if found is not None:
            return found
        # Grown geometrically, so that a few sizes serve many shapes.
        size = 1 << (max(size, _MIN_BYTES) - 1).bit_length()
        segment, region_id = self._new_segment(size)
        with self._lock:
            self._busy[region_id] = segment
        return segment, region_id

    def release(self, scratch):
        segment, region_id = scratch
        with self._lock:
            self._busy.pop(region_id, None)
            self._idle.append(scratch)
            self._idle.sort(key=lambda entry: entry[0].size)
            idle_bytes = sum(segment.size for segment, _ in self._idle)
            while len(self._idle) > 1 and (len(self._idle) > self._keep or
                                           idle_bytes > self._keep_bytes):
                dropped = self._idle.pop(0)
                idle_bytes -= dropped[0].size
                self._surplus.append(dropped)

    def close(self):
        """The segments, idle or not, for the caller to close; the pool is
        empty afterwards (the session's end releases the regions)."""
        with self._lock:
            segments = [s for s, _ in self._idle + self._surplus]
            segments += self._busy.values()
            self._idle, self._surplus, self._busy = [], [], {}
        return segments

    def _drop(self, entries):
        for segment, region_id in entries:
            try:
                self._unregister(region_id)
            finally:
                segment.close()
