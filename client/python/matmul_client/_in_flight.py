"""The products a Client has in flight (matmul_async): their futures, and
the errors Client.synchronize() still has to raise."""

import concurrent.futures
import threading


class _ProductFuture(concurrent.futures.Future):
    """A product's concurrent.futures.Future; notes whether its error has
    reached the caller (through result() or exception()), so that
    synchronize() does not raise it again."""

    def __init__(self, sequence, hidden):
        super().__init__()
        self._sequence = sequence
        self._error_raised = False
        # Never handed to the caller (a stream-ordered matmul): its error
        # raises at the client's next call.
        self._hidden = hidden

    def result(self, timeout=None):
        try:
            return super().result(timeout)
        except concurrent.futures.CancelledError:
            raise
        except BaseException:
            if self.done():  # not a timeout of this wait
                self._error_raised = True
            raise

    def exception(self, timeout=None):
        error = super().exception(timeout)
        if error is not None:
            self._error_raised = True
        return error


class _InFlight:
    """Futures of the products in flight, and those that failed since the
    last synchronize(). Thread-safe; finish() may run on any thread."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sequence = 0
        self._pending = set()
        self._failed = []

    def start(self, hidden=False):
        with self._lock:
            self._sequence += 1
            future = _ProductFuture(self._sequence, hidden)
            # Running from the start: the product cannot be taken back, so
            # cancel() says False.
            future.set_running_or_notify_cancel()
            self._pending.add(future)
            return future

    def finish(self, future, result=None, error=None):
        """Completes `future` with `result`, or with `error` when set."""
        with self._lock:
            self._pending.discard(future)
            if error is not None:
                self._failed.append(future)
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)

    def abandon(self, future):
        """Forgets a future whose product was never sent (its caller got
        the error instead)."""
        with self._lock:
            self._pending.discard(future)

    def wait(self):
        """Waits until every product in flight now has finished."""
        with self._lock:
            pending = list(self._pending)
        concurrent.futures.wait(pending)

    def synchronize(self):
        """wait(), then raise_failures()."""
        self.wait()
        self.raise_failures()

    def raise_failures(self, hidden_only=False):
        """Raises the first error (in the order the products were sent)
        among the failures (only those of hidden futures, with
        `hidden_only`) that were not raised yet; later ones count as
        reported with it."""
        with self._lock:
            failed = [f for f in self._failed
                      if f._hidden or not hidden_only]
            self._failed = [f for f in self._failed if f not in failed]
        unraised = sorted((f for f in failed if not f._error_raised),
                          key=lambda f: f._sequence)
        if not unraised:
            return
        first = unraised[0]
        for future in unraised:
            future._error_raised = True
        error = first.exception()
        if len(unraised) > 1 and hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"{len(unraised) - 1} more product(s) of this "
                           "client failed since the last synchronize()")
        raise error
