"""Shared by the test servers: a server never outlives the test process that started it."""

import os
import time


def watchdog(max_seconds):
    """Exits the process when its parent dies (the test run ended) or after max_seconds. Run it
    on a daemon thread."""
    parent = os.getppid()
    deadline = time.monotonic() + max_seconds
    while True:
        time.sleep(0.5)
        if os.getppid() != parent or time.monotonic() > deadline:
            os._exit(0)
