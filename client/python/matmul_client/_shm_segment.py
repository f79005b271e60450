"""POSIX shm segments of this process, and the removal of those that
clients killed before they could unlink them."""

import ctypes
import mmap
import os
import secrets
import threading


def _pid_namespace():
    """The inode of this process's pid namespace: pids name processes only
    within one, and /dev/shm may be shared across several (containers with
    --ipc=host). None where it cannot be read."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _segment_owner(name, prefix):
    """(pid, pid namespace) a segment name of this client's format carries,
    or None for any other name."""
    head = prefix + "-py"
    if not name.startswith(head):
        return None
    parts = name[len(head):].split("-")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1])


_reaped_prefixes = set()
_reap_lock = threading.Lock()


def _reap_orphaned_segments(prefix):
    """Unlinks this user's segments that a client of this pid namespace left
    behind when it died (SIGKILL, a crash) in the moment between creating a
    segment and unlinking it once RegisterRegion answered. A name whose pid
    is alive, or that comes from another pid namespace (where the pid means
    nothing here), is left alone. Returns the names removed."""
    namespace = _pid_namespace()
    if namespace is None:
        return []
    removed = []
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return []
    for name in names:
        owner = _segment_owner(name, prefix)
        if owner is None or owner[1] != namespace or owner[0] == os.getpid():
            continue
        path = "/dev/shm/" + name
        try:
            if os.stat(path).st_uid != os.getuid():
                continue
            os.kill(owner[0], 0)
            continue  # its maker is alive (or its pid was reused)
        except ProcessLookupError:
            pass
        except OSError:
            continue  # gone already, or a process we may not signal: alive
        try:
            os.unlink(path)
            removed.append(name)
        except OSError:
            pass
    return removed


class _SharedSegment:
    """A POSIX shm object of this process (created O_EXCL, mode 0600, under
    a random name with the daemon's prefix) and its mapping. Linux keeps
    POSIX shm in /dev/shm, so plain os.open does what shm_open does.

    The daemon opens the object by name at RegisterRegion, so the name must
    exist until that answers; the client unlinks it right then (and on every
    failure path). A process killed inside that window leaves the name
    behind: it carries the pid and pid namespace of its maker
    ("<prefix>-py<pid>-<namespace>-<random>"), and the first segment a later
    client of this user creates removes such names of dead makers."""

    def __init__(self, size, prefix):
        with _reap_lock:
            if prefix not in _reaped_prefixes:
                _reaped_prefixes.add(prefix)
                _reap_orphaned_segments(prefix)
        namespace = _pid_namespace() or 0
        for _ in range(4):
            self.name = (f"{prefix}-py{os.getpid()}-{namespace}-"
                         f"{secrets.token_hex(8)}")
            self._path = "/dev/shm/" + self.name
            try:
                fd = os.open(self._path,
                             os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o600)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(f"could not create a fresh shm object {prefix}-*")
        self._linked = True
        try:
            os.ftruncate(fd, size)
            self._mmap = mmap.mmap(fd, size)
        except BaseException:
            self.unlink()
            raise
        finally:
            os.close(fd)  # the mapping keeps the object alive
        self.size = size
        # ctypes view for the base address (memmove to and from torch).
        self._holder = (ctypes.c_char * size).from_buffer(self._mmap)
        self.address = ctypes.addressof(self._holder)
        self.view = memoryview(self._mmap)

    def contains(self, address, nbytes):
        return self.address <= address and \
            address + nbytes <= self.address + self.size

    def unlink(self):
        if self._linked:
            self._linked = False
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass

    def close(self):
        self.unlink()
        self.view.release()
        del self._holder
        try:
            self._mmap.close()
        except BufferError:
            pass  # tensors still view it: unmapped when the last one goes
