"""What a :class:`~pai_actors.SqliteStore` keeps in memory of the threads it last touched:
their messages, runs and calls, so that reading back what the store wrote runs no query and
parses nothing.

A runtime reads its own writes all the time (a run reads its messages before each model step
and its calls after each change; a submission reads the call it resolves), and answering
those from SQL meant a query and a pydantic parse of every record, every time. The mirror
holds, in plain lists and dicts changed in place, the records of every thread with a
``running`` run (as many as the runtime runs at once: ``max_active_runs``) and of the
:data:`MIRRORED_THREADS` others used last (least recently used first out), so that a burst of
conversations in flight never pushes out the threads being worked on:

- a thread enters it whole, when the store creates it or first reads it (its messages, runs
  and calls, in one read each);
- a thread with no message and no run yet (just created: its first message is most often on
  its way) is one of the :data:`FRESH_THREADS` newest such ones, not an idle one: a burst of
  new conversations (a thousand clients each creating a thread, then sending to it) would
  otherwise push each other out before their first message, and each be read back whole;
- every commit the store wrote is applied to it after SQLite's ``COMMIT`` returned, and only
  the commits SQLite applied (one refused under its savepoint changes nothing here); SQLite
  has checked them, so applying one checks nothing again;
- it is dropped whole when another connection has written the file since the store last
  looked (``PRAGMA data_version`` changed: another process, or another store object on the
  same file), so it never answers with a state older than the file's.

Records are shared with the readers, as :class:`~pai_actors.MemoryStore` shares them (the
Store protocol's contract: records are immutable, and their JSON values are read-only to the
runtime); the lists a read returns are new.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .._core.parts import Message, ToolPart
from .._core.records import RunRecord, StoredCall, ThreadRecord
from .._core.wire import updated
from .base import (
    AppendMessage,
    CreateThread,
    PutCall,
    PutRun,
    PutToolPart,
    ReplaceMessage,
    SaveFile,
    Write,
)

MIRRORED_THREADS = 256
"""How many threads without a ``running`` run a :class:`~pai_actors.SqliteStore` keeps in
memory besides those with one: a conversation in flight touches its thread many times a
second, a suspended one not again until it is resumed (most often soon, by a client that
watched it suspend), so a few hundred recent ones cover those without holding every waiting
one (a suspended call costs its stored row, not memory)."""


FRESH_THREADS = 16_384
"""How many threads with no message and no run yet a store keeps in memory besides the others
(newest first; the oldest out): such a thread holds its record alone, about a kilobyte, and
only until its first message or run. Enough for a burst of ten thousand new conversations
at once (the W2 workload): past this bound, each thread the burst created first is pushed
out before its first message and read back whole when it comes (and, on PostgreSQL, its
sender waits for a pooled connection to read it). At most 16 MiB, for threads nobody sends
to."""


class MirroredThread:
    """A thread's records as the file holds them: its messages and runs in order, its calls
    in the order they were created (a dict keeps the order of first insertion)."""

    __slots__ = ("calls", "message_at", "messages", "record", "released", "runs")

    def __init__(
        self,
        record: ThreadRecord,
        messages: Iterable[Message] = (),
        runs: Iterable[RunRecord] = (),
        calls: Iterable[StoredCall] = (),
    ) -> None:
        self.record = record
        self.messages = list(messages)
        self.message_at = {message.id: i for i, message in enumerate(self.messages)}
        self.runs = {run.run_id: run for run in runs}
        self.calls = {call.tool_call_id: call for call in calls}
        # (a PostgreSQL node's) the epoch of the lease this node gave the thread up at,
        # whose records these are as it left them; ``None`` while it owns the thread
        self.released: int | None = None

    def put_part(self, message_id: str, part: ToolPart) -> None:
        """Replace the tool part of ``part.tool_call_id`` in the message, or append it."""
        at = self.message_at[message_id]
        message = self.messages[at]
        parts = message.parts
        for i, old in enumerate(parts):
            if isinstance(old, ToolPart) and old.tool_call_id == part.tool_call_id:
                parts = (*parts[:i], part, *parts[i + 1 :])
                break
        else:
            parts = (*parts, part)
        self.messages[at] = updated(message, parts=parts)


class Mirror:
    """The mirrored threads. Not thread-safe: the store's own (trio) thread uses it."""

    __slots__ = ("_fresh", "_idle", "_run_threads", "_running", "limit", "threads")

    def __init__(self, limit: int = MIRRORED_THREADS) -> None:
        self.limit = limit
        self.threads: dict[str, MirroredThread] = {}  # by thread id
        self._run_threads: dict[str, MirroredThread] = {}  # every run of a mirrored thread
        # thread id -> its running run, for the threads that have one: never evicted
        self._running: dict[str, str] = {}
        # the ids of the threads without a running run, least recently used first (a dict
        # keeps insertion order): at most ``limit``, the oldest evicted first
        # least recently used first (an OrderedDict: taking the oldest is O(1); a dict's
        # first key is found past the slots its deleted keys left, which grew costly)
        self._idle: OrderedDict[str, None] = OrderedDict()
        # the ids of the threads with no message and no run yet, oldest first: at most
        # FRESH_THREADS, counted apart from the idle ones
        self._fresh: OrderedDict[str, None] = OrderedDict()

    def clear(self) -> None:
        """Forget every thread (another connection changed the file)."""
        self.threads.clear()
        self._run_threads.clear()
        self._running.clear()
        self._idle.clear()
        self._fresh.clear()

    def forget(self, thread_id: str) -> None:
        """Forget one thread (another process may write it now)."""
        thread = self.threads.pop(thread_id, None)
        if thread is not None:
            for run_id in thread.runs:
                self._run_threads.pop(run_id, None)
        self._running.pop(thread_id, None)
        self._idle.pop(thread_id, None)
        self._fresh.pop(thread_id, None)

    def thread(self, thread_id: str) -> MirroredThread | None:
        """The mirrored thread, or ``None`` when it is not mirrored."""
        found = self.threads.get(thread_id)
        idle = self._idle
        if found is not None and thread_id in idle:
            idle.move_to_end(thread_id)  # the most recently used now
        return found

    def run(self, run_id: str) -> RunRecord | None:
        """The run, if its thread is mirrored (every run of a mirrored thread is)."""
        thread = self._run_threads.get(run_id)
        return None if thread is None else thread.runs[run_id]

    def load(
        self,
        record: ThreadRecord,
        messages: Iterable[Message],
        runs: Sequence[RunRecord],
        calls: Iterable[StoredCall],
    ) -> MirroredThread:
        """Mirror a thread read whole from the file: its messages, runs and calls in order."""
        thread = MirroredThread(record, messages, runs, calls)
        thread_id = record.thread_id
        self.threads[thread_id] = thread
        for run in runs:
            self._run_threads[run.run_id] = thread
            if run.status == "running":
                self._running[thread_id] = run.run_id
        if thread_id not in self._running:
            if thread.messages or runs:
                self._set_idle(thread_id)
            else:
                self._set_fresh(thread_id)
        return thread

    def apply(self, writes: Sequence[Write]) -> None:
        """Apply a commit SQLite wrote: the writes to mirrored threads, and new threads."""
        threads = self.threads
        for write in writes:
            if isinstance(write, PutCall):  # the most frequent write first
                call = write.stored
                thread = threads.get(call.thread_id)
                if thread is not None:
                    thread.calls[call.tool_call_id] = call
            elif isinstance(write, PutToolPart):
                thread = threads.get(write.thread_id)
                if thread is not None:
                    thread.put_part(write.message_id, write.part)
            elif isinstance(write, PutRun):
                run = write.stored
                thread = threads.get(run.thread_id)
                if thread is not None:
                    thread.runs[run.run_id] = run
                    self._run_threads[run.run_id] = thread
                    self._note_status(run)
                    self._grown(run.thread_id)
            elif isinstance(write, AppendMessage):
                thread = threads.get(write.thread_id)
                if thread is not None:
                    thread.message_at[write.message.id] = len(thread.messages)
                    thread.messages.append(write.message)
                    self._grown(write.thread_id)
            elif isinstance(write, ReplaceMessage):
                thread = threads.get(write.thread_id)
                if thread is not None:
                    thread.messages[thread.message_at[write.message.id]] = write.message
            elif isinstance(write, CreateThread):
                thread_id = write.thread.thread_id
                threads[thread_id] = MirroredThread(write.thread)
                self._set_fresh(thread_id)
            else:
                assert isinstance(write, SaveFile)  # files are not mirrored

    def _note_status(self, run: RunRecord) -> None:
        """Keep a thread with a running run out of the idle ones; when its run stops, it is
        the most recently used idle one (and the oldest idle beyond the limit goes)."""
        running, thread_id = self._running, run.thread_id
        if run.status == "running":
            running[thread_id] = run.run_id
            self._idle.pop(thread_id, None)
        elif running.get(thread_id) == run.run_id:
            del running[thread_id]
            self._set_idle(thread_id)

    def _grown(self, thread_id: str) -> None:
        """A thread got its first message or run: no longer a fresh one (an idle one unless
        its run is running)."""
        if self._fresh.pop(thread_id, 0) is None and thread_id not in self._running:
            self._set_idle(thread_id)

    def _set_fresh(self, thread_id: str) -> None:
        fresh = self._fresh
        fresh[thread_id] = None
        if len(fresh) > FRESH_THREADS:  # the oldest fresh thread goes
            oldest, _ = fresh.popitem(last=False)
            del self.threads[oldest]  # (it has no run)

    def _set_idle(self, thread_id: str) -> None:
        idle = self._idle
        idle[thread_id] = None
        idle.move_to_end(thread_id)
        if len(idle) > self.limit:  # the least recently used idle thread goes
            oldest, _ = idle.popitem(last=False)
            for run_id in self.threads.pop(oldest).runs:
                del self._run_threads[run_id]
