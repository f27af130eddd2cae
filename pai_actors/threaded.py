"""Using :mod:`pai_actors` from synchronous code: a runtime on its own thread.

``start(factory)`` runs an :class:`~pai_actors.AgentRuntime` in a new OS thread (running
``trio.run``) and returns a :class:`ThreadedRuntime`, whose methods return pykka futures
(:class:`ThreadedFuture`: ``.get(timeout=...)``)::

    from pai_actors import create_agent_runtime
    from pai_actors import threaded

    with threaded.start(lambda: create_agent_runtime(agent)) as rt:
        thread_id = rt.create_thread("tenant-a").get(timeout=5)
        rt.send(thread_id, "hello").get(timeout=5)
        rt.wait_idle(thread_id, timeout=30).get()

This module imports pykka; ``import pai_actors`` does not. See
``docs/guides/synchronous.md``.
"""

from ._threaded import ThreadedFuture as ThreadedFuture
from ._threaded import ThreadedPendingAction as ThreadedPendingAction
from ._threaded import ThreadedRuntime as ThreadedRuntime
from ._threaded import start as start

__all__ = ["ThreadedFuture", "ThreadedPendingAction", "ThreadedRuntime", "start"]

for _name in __all__:
    globals()[_name].__module__ = __name__  # tracebacks read pai_actors.threaded.ThreadedRuntime
del _name
