"""Read-ahead of any iterator in a background thread, so the accelerator does not wait for Python data work."""

from __future__ import annotations

import queue
import threading
import time


class PrefetchIterator:
    """Runs an iterator in a daemon thread, `depth` items ahead; exceptions are re-raised in the consumer.

    `wait_seconds` accumulates the time the consumer spent blocked on the queue (data starvation).
    """

    _END = object()

    def __init__(self, iterable, depth: int = 8) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self.wait_seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(iterable,), daemon=True)
        self._thread.start()

    def _run(self, iterable) -> None:
        try:
            for item in iterable:
                while not self._stop.is_set():
                    try:
                        self._queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
            self._queue.put(self._END)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer
            self._queue.put(error)

    def __iter__(self):
        return self

    def __next__(self):
        start = time.perf_counter()
        item = self._queue.get()
        self.wait_seconds += time.perf_counter() - start
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
