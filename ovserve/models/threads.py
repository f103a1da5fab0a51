"""Worker threads that exist before the first request needs them.

``ThreadPoolExecutor`` starts its threads lazily, inside ``submit``: called from the event loop,
that is a ``Thread.start`` on the loop, which waits for the new thread to run, which waits for the
GIL. A thread that holds the GIL inside a long C call (a tokenizer, a JSON parser) then stalls the
loop, and a deadlocked one freezes it (seen with the tokenizer). Threads made here are started at
once by a no-op job, from whichever thread builds them (model loading runs in a startup thread).
"""

from __future__ import annotations

import concurrent.futures


def started_thread(name: str) -> concurrent.futures.ThreadPoolExecutor:
    """A one-thread executor whose thread is already running: jobs on it run one at a time, in order."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
    executor.submit(lambda: None).result()
    return executor
