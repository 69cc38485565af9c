"""Running a test's work on several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_threads(work: Callable[[int], None], n: int) -> None:
    """``work(k)`` on ``n`` threads released together; the first failure is re-raised."""
    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            start.wait()
            work(k)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
