"""The thread that copies a :class:`~pai_actors.SqliteStore`'s WAL into its database file
(:class:`_Checkpointer`), so that no commit on the trio thread runs a checkpoint. Why and how:
``docs/design.md``, "WAL checkpoints on a thread of the store's own"."""

from __future__ import annotations

import sqlite3
import threading

_TAIL_FRAMES = 32
"""Frames the commits may add during one of the checkpointer's passes for the store to copy
the rest itself; more, and the thread runs another pass (up to :data:`_PASSES`)."""

_PASSES = 5
"""Checkpoint passes the thread runs in a row for one wake."""


class _Checkpointer:
    """A thread that copies a :class:`SqliteStore`'s WAL into its database file.

    It owns a second connection to the file and runs ``PRAGMA wal_checkpoint(PASSIVE)`` (the
    fsyncs of the log and of the database file with it) when :meth:`wake` tells it rows
    changed. A pass copies the log as it was when the pass began; the commits that land
    meanwhile are the next pass's, so it runs passes until one finds nothing new (``copied``
    is then the ``total_changes`` of the store's connection at the wake: the next commit
    restarts the log) or the commits added at most :data:`_TAIL_FRAMES` during one: it sets
    ``tail_wanted``, and the store copies that tail itself after its next commit, where no
    commit can land during the checkpoint.

    Concurrency contract: :meth:`wake` and :meth:`stop` are called by the store's thread.
    :meth:`wake` sets a :class:`threading.Event` and returns; a PASSIVE checkpoint takes no
    lock a writer needs, so nothing the thread does makes the store wait, and the thread
    never calls into trio. :meth:`stop` joins the thread (the pass in progress, if any,
    finishes first), which closes its connection; it is idempotent. The attributes shared
    with the store are single reads and writes; a lost update costs one missed tail, which
    the store's :data:`_WAL_LIMIT` catches.

    A checkpoint that fails (an I/O error, a full disk) is kept in ``error`` and tried again
    at the next wake, as SQLite does with the checkpoints it runs itself: the commits it
    follows are written, and a lasting fault surfaces in the next commit that meets it, as
    that commit's :class:`~pai_actors.StoreError`.
    """

    def __init__(self, path: str, synchronous: str) -> None:
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            db.execute(f"PRAGMA synchronous = {synchronous}")
        except BaseException:
            db.close()
            raise
        self._db = db
        self._wanted = 0  # total_changes of the store's connection at the last wake
        self.copied = 0  # its total_changes when the whole log was last copied here
        self.tail_wanted = False  # set here, cleared by the store once it copied the tail
        self.wakes = 0  # wake() calls so far
        self.handled = 0  # wake() calls the thread has answered (for tests: wait_handled)
        self.error: sqlite3.OperationalError | None = None  # the last wake's, if it failed
        self._stopping = False
        self._woken = threading.Event()
        self._passed = threading.Condition()
        self._thread = threading.Thread(
            target=self._run, name=f"pai_actors sqlite checkpointer {path}", daemon=True
        )
        self._thread.start()

    def wake(self, changes: int) -> None:
        self._wanted = changes
        self.wakes += 1
        self._woken.set()

    def stop(self) -> None:
        self._stopping = True
        self._woken.set()
        if threading.current_thread() is not self._thread:  # the collector may run it there
            self._thread.join()

    def wait_handled(self, timeout: float) -> bool:
        """Wait until the thread has answered every :meth:`wake` so far (several wakes
        during one of its checkpoints are answered by the next); for tests."""
        with self._passed:
            return self._passed.wait_for(lambda: self.handled >= self.wakes, timeout)

    def _run(self) -> None:
        try:
            while True:
                self._woken.wait()
                self._woken.clear()
                if self._stopping:
                    return
                wakes, wanted = self.wakes, self._wanted
                try:
                    self._copy(wanted)
                except sqlite3.OperationalError as exc:
                    self.error = exc
                with self._passed:
                    self.handled = wakes
                    self._passed.notify_all()
        finally:
            self._db.close()

    def _copy(self, wanted: int) -> None:
        before = -1
        for _ in range(_PASSES):
            busy, frames, _copied = self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if busy:  # another checkpoint is running: it copies what this one would
                return
            if frames <= before:  # nothing new since the last pass, or the log restarted
                self.copied = wanted
                return
            if 0 <= before and frames - before <= _TAIL_FRAMES:
                self.tail_wanted = True
                return
            before = frames
