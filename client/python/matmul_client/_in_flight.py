"""The products a Client has in flight (matmul_async futures), the number
that orders every product it sends, and the errors the client still has to
raise: those of futures (at Client.synchronize()) and those of
stream-ordered products (at the client's next call)."""

import concurrent.futures
import itertools
import threading


class _ProductFuture(concurrent.futures.Future):
    """A product's concurrent.futures.Future; notes whether its error has
    reached the caller (through result() or exception()), so that
    synchronize() does not raise it again."""

    _hidden = False  # handed to the caller

    def __init__(self, number):
        super().__init__()
        self._number = number
        self._error_raised = False

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


class _StreamFailure:
    """A stream-ordered product that failed: no future was handed out for
    it, so its error raises at the client's next call."""

    _hidden = True

    def __init__(self, number, error):
        self._number = number
        self._error = error
        self._error_raised = False

    def exception(self):
        return self._error


class _InFlight:
    """Futures of the products in flight, and the failures not raised yet
    since the last synchronize(). Thread-safe; finish() may run on any
    thread."""

    def __init__(self):
        self._lock = threading.Lock()
        # Every product's number, in the order they are sent (futures and
        # stream-ordered products alike): errors raise in that order.
        # next() on it is atomic.
        self._numbers = itertools.count(1)
        self._pending = set()
        self._failed = []

    def number(self):
        """The next product's number (a stream-ordered product's, which
        comes back with its failure)."""
        return next(self._numbers)

    def number_source(self):
        """The iterator number() draws from (the native fast path draws
        from it too)."""
        return self._numbers

    def start(self):
        future = _ProductFuture(next(self._numbers))
        # Running from the start: the product cannot be taken back, so
        # cancel() says False.
        future.set_running_or_notify_cancel()
        with self._lock:
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

    def add_stream_failures(self, failures):
        """Notes failed stream-ordered products: (number, error) pairs."""
        if not failures:
            return
        with self._lock:
            self._failed.extend(_StreamFailure(number, error)
                                for number, error in failures)

    def wait(self):
        """Waits until every future in flight now has finished."""
        with self._lock:
            pending = list(self._pending)
        concurrent.futures.wait(pending)

    def raise_failures(self, hidden_only=False):
        """Raises the first error (in the order the products were sent)
        among the failures (only those of stream-ordered products, with
        `hidden_only`) that were not raised yet; later ones count as
        reported with it."""
        if not self._failed:  # the usual case, without the lock
            return
        with self._lock:
            failed = [f for f in self._failed
                      if f._hidden or not hidden_only]
            self._failed = [f for f in self._failed if f not in failed]
        unraised = sorted((f for f in failed if not f._error_raised),
                          key=lambda f: f._number)
        if not unraised:
            return
        first = unraised[0]
        for failure in unraised:
            failure._error_raised = True
        error = first.exception()
        if len(unraised) > 1 and hasattr(error, "add_note"):  # Python 3.11+
            error.add_note(f"{len(unraised) - 1} more product(s) of this "
                           "client failed since the last synchronize()")
        raise error
