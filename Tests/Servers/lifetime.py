"""Shared by the test servers: a server never outlives the test process that started it, and tells
the test its port."""

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


def write_port(port_file, port):
    """Writes the port a server got to port_file (when given) all at once: a test polling the file
    never reads half of it."""
    if not port_file:
        return
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(port))
    os.replace(tmp, port_file)
