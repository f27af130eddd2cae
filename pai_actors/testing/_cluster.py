"""Several simulated nodes on one in-memory database: :class:`NodeStore`, one node's store
with the node protocol of :class:`~pai_actors.PostgresStore` (leases, fencing, requests
between nodes, notifications), on a :class:`SharedMemory`; deterministic under
``trio.testing.MockClock``.

Why it exists. Several runtimes ("nodes") may share one PostgreSQL database, each a
``PostgresStore(url, node_id=...)``: a node owns a thread by a lease, a node that lost one is
fenced, a request for a thread another node drives is handed to it, and a node hears of the
others' commits (``_store.postgres_owners``, ``_store.postgres_requests``,
``_runtime.forwarding``). PostgreSQL cannot run under ``MockClock(autojump_threshold=0)`` (a
wait for the server looks idle, the clock jumps), so a simulation of several nodes needs the
protocol in memory.

What is PostgreSQL's code and what is redone. The node's bookkeeping and decisions are
``postgres_owners.Owners`` (claiming, renewing, giving up and fencing leases, refusing in the
same words), ``orphaned_threads`` and the functions of ``postgres_requests``, run unchanged
on a :class:`~pai_actors.testing._shared_memory.Database` instead of a connection (see
``_shared_memory``). Redone here: ``PostgresStore``'s flow around them (a commit claims the
threads it writes, applies its writes, gives up those it leaves with no running run and
announces those it changed, all or nothing; :meth:`NodeStore.take`;
:meth:`NodeStore.keep_leases`; :meth:`NodeStore.follow_other_nodes`), with each commit a
transaction of its own (no group commit) and no mirror (every read sees the last commit).

Faults (:meth:`NodeStore.pause`, :meth:`NodeStore.resume`, :meth:`NodeStore.kill`). A
paused node is a process stopped, or cut off, for a while: everything it asks waits, its
renewals stop, and what the others notify reaches it once it resumes; paused past its
lease, it finds its threads taken over and its writes fenced. A killed node is a process
gone, as a simulation's crash is: everything it asks raises
:class:`~pai_actors.StoreError`, its renewals and notifications stop, its leases run out.

Wiring a node (what ``pai-actors serve --node-id`` runs, ``_cli.serve``): a runtime on the
node's store (:func:`create_node_runtime`; as it opens, the runtime follows the other nodes
itself: ``follow_other_nodes``) and, beside it, :func:`keep_node` (``keep_leases``, and a
look for the runs of stopped nodes every half lease)::

    shared = SharedMemory()
    store = NodeStore(shared, "a", lease=10)
    async with create_node_runtime(agent, model=model, store=store) as rt:
        async with trio.open_nursery() as nursery:
            await nursery.start(keep_node, rt, store)
            ...  # kill: store.kill(), then cancel what runs the runtime and keep_node
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import trio

from .._core.errors import PaiError, StoreError, ThreadOwnedElsewhere
from .._core.model import Model
from .._core.parts import Message, ToolDataItem
from .._core.records import OpenAction, RunRecord, StoredCall, StoredFileBody, ThreadRecord
from .._core.updates import ThreadUpdateOrDelta
from .._runtime.clock import trio_clock
from .._runtime.create import counter_ids, create_agent_runtime
from .._runtime.runtime import AgentRuntime
from .._store import postgres_requests as requests
from .._store import postgres_updates as updates
from .._store.base import Transaction, Write
from .._store.memory import MemoryStore
from .._store.memory import _apply as apply_writes  # (staged with the leases: see commit)
from .._store.postgres_group import Commit, stopped, thread_ids  # (what a commit claims, gives up)
from .._store.postgres_owners import CHANGES, Owners, orphaned_threads
from .._store.postgres_requests import ANSWERED, REQUESTED
from .._tools.agent import AgentDefinition, Pai
from ._shared_memory import SharedMemory as SharedMemory  # (one import for the cluster)

_log = logging.getLogger("pai_actors.store")


class NodeStore:
    """One node's :class:`~pai_actors.Store` on a :class:`SharedMemory`:
    ``NodeStore(shared, "a", lease=10)``, as ``PostgresStore(url, node_id="a", lease=10)``
    is on a database.

    The records are the shared :class:`~pai_actors.MemoryStore` data; the node API is
    ``PostgresStore``'s, with its semantics (see the module's docstring): ``node_id``,
    ``lease``, :meth:`on_lost`, :meth:`on_fenced`, :meth:`take`, :meth:`keep_leases`,
    :meth:`orphaned_threads`, :meth:`follow_other_nodes`, :meth:`holds`, :meth:`forward`,
    :meth:`open_requests`, :meth:`answer`, :meth:`take_answer`, :meth:`withdraw`. A commit
    takes or renews the lease of each thread it writes (at a raised epoch when it takes
    one), and is refused with :class:`~pai_actors.ThreadOwnedElsewhere` when another node's
    lease is live or this node lost the thread; it gives up at once the leases of the
    threads it leaves with no running run. Faults: :meth:`pause`, :meth:`resume`,
    :meth:`kill`.

    Concurrency contract: every method is atomic with respect to other tasks and to
    cancellation. A commit either applies its whole batch (with its leases and its
    notifications) and returns, or raises (:class:`~pai_actors.StoreConflict`,
    :class:`~pai_actors.ThreadOwnedElsewhere`, :class:`~pai_actors.StoreError` once the
    node is killed, ``trio.Cancelled`` before it started) and changes nothing. While the
    node is paused, a call waits (cancellably, having done nothing) until it resumes."""

    def __init__(self, shared: SharedMemory, node_id: str, *, lease: float = 10.0) -> None:
        self._owners = Owners(node_id, lease)  # (checks both)
        self._shared = shared
        self._data = MemoryStore(shared.backing)
        self.data_store = self._data  # (a test runtime's ids continue the generations it holds)
        self._resumed: trio.Event | None = None  # while paused: what resume() sets
        self._killed = False

    def __repr__(self) -> str:
        return f"NodeStore(node_id={self.node_id!r})"

    @property
    def shared(self) -> SharedMemory:
        """The database this node shares."""
        return self._shared

    # -- faults ------------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """Whether the node is paused (:meth:`pause`) and not resumed yet."""
        return self._resumed is not None

    @property
    def killed(self) -> bool:
        """Whether the node was killed (:meth:`kill`): for good."""
        return self._killed

    def pause(self) -> None:
        """Stop the node's process (or cut it off from the database): whatever it asks from
        now on waits, its renewals stop, and the others' notifications wait for it, until
        :meth:`resume`. Paused past its lease, it finds its threads taken over."""
        if self._resumed is None:
            self._resumed = trio.Event()

    def resume(self) -> None:
        """The paused node goes on: what it asked meanwhile goes through now (a write to a
        thread it lost is refused: fenced)."""
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            resumed.set()

    def kill(self) -> None:
        """The node's process is gone (``SIGKILL``): whatever it asks raises
        :class:`~pai_actors.StoreError`, its renewals and notifications stop, and its leases
        run out. Its tasks are the caller's to cancel, as a dead process's are."""
        self._killed = True
        self.resume()

    async def _reach(self) -> None:
        """Reach the database: wait while paused; :class:`StoreError` once killed. Then
        checkpoint if cancelled (nothing is done yet)."""
        while self._resumed is not None:
            await self._resumed.wait()
        if self._killed:
            raise StoreError(
                f"node {self.node_id!r} was killed (simulated): nothing it asks reaches the "
                "shared store"
            )
        await trio.lowlevel.checkpoint_if_cancelled()

    # -- writes ------------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        return Transaction(self)

    async def commit(self, writes: Sequence[Write]) -> None:
        """Apply ``writes`` atomically, with the leases of the threads they write: what
        ``PostgresStore.commit`` does in one transaction, done here in one step."""
        await self._reach()
        owners, backing = self._owners, self._shared.backing
        commit = Commit(writes, log_as=self.node_id)
        written = sorted(set(thread_ids([commit])))
        db = self._shared.connect(self, autocommit=False)
        # Nothing below checkpoints until the commit is installed: a refusal (raised here)
        # leaves the records and the leases as they were, and no other task sees one
        # changed without the other.
        claimed = await owners.claim(db, written)
        db.write(apply_writes(backing.tables, writes, backing.sequence), writes)
        for sql, params in commit.log:  # the updates it shows, for the other nodes' watchers
            await db.fetch(sql, *params)
        released = await owners.release(db, claimed, stopped(commit))
        await owners.announce(db, written)
        db.commit()
        owners.hold(claimed)
        owners.given_up(released)
        await trio.lowlevel.cancel_shielded_checkpoint()

    # -- the node API (``PostgresStore``'s) --------------------------------------------------

    @property
    def node_id(self) -> str:
        """The node this store writes as."""
        return self._owners.node_id

    @property
    def lease(self) -> float:
        """How long (seconds of trio time) this node's lease of a thread lasts past its last
        renewal."""
        return self._owners.lease

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` whenever this node stops owning a thread."""
        self._owners.on_lost(callback)

    def on_fenced(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(thread_id)`` when another node took a thread from this one."""
        self._owners.on_fenced(callback)

    def fenced(self, thread_id: str) -> bool:
        """Whether this node lost ``thread_id`` to another and has not taken it again
        (:meth:`take`): its writes of it are refused meanwhile."""
        return thread_id in self._owners.fenced

    def holds(self, thread_id: str) -> bool:
        """Whether this node holds the lease of ``thread_id`` (as far as it knows)."""
        return thread_id in self._owners.held

    async def take(self, thread_id: str) -> bool:
        """Take ``thread_id`` for this node now (its lease, in a transaction of its own);
        ``False`` when another node owns it. Lifts the fence of a thread this node lost."""
        await self._reach()
        owners = self._owners
        owners.fenced.discard(thread_id)
        db = self._shared.connect(self, autocommit=False)
        try:
            claimed = await owners.claim(db, [thread_id])
        except ThreadOwnedElsewhere:
            taken = False
        else:
            db.commit()
            owners.hold(claimed)
            taken = True
        await trio.lowlevel.cancel_shielded_checkpoint()
        return taken

    async def keep_leases(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Renew this node's leases and give up those of threads with no running run, at
        once and then every third of a lease, until cancelled (``nursery.start`` returns
        after the first round). Paused, the node renews nothing; killed, it stops."""
        owners = self._owners
        pruned_at = -math.inf
        while True:
            try:
                await self._reach()
                db = self._shared.connect(self, autocommit=True)
                await owners.renew(db)
                await owners.release_idle(db)
                if trio.current_time() - pruned_at >= updates.PRUNE_EVERY:
                    pruned_at = trio.current_time()
                    await updates.prune(db)
            except StoreError:
                if self._killed:  # a process gone renews nothing
                    task_status.started()
                    return
                _log.warning("renewing the leases of node %r failed", self.node_id, exc_info=True)
            task_status.started()
            task_status = trio.TASK_STATUS_IGNORED
            await trio.sleep(owners.lease / 3)

    async def orphaned_threads(self, limit: int = 100) -> list[str]:
        """Threads with a running run whose owner's lease expired (or that have none),
        oldest run first: a node stopped while it drove them."""
        await self._reach()
        found = await orphaned_threads(self._shared.connect(self, autocommit=True), limit)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return found

    async def follow_other_nodes(
        self,
        changed: Callable[[str, int], None],
        *,
        requested: Callable[[str], None] | None = None,
        answered: Callable[[int], None] | None = None,
        live: Callable[[ThreadUpdateOrDelta], None] | None = None,
        watching: Callable[[str], None] | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Call ``changed(thread_id, logged)`` each time another node (another store object)
        commits a change to a thread (``logged``: the thread's last row in the update log
        then), in commit order, until cancelled; with ``requested``, also
        ``requested(thread_id)`` when a node stores a request for the owner of
        ``thread_id``; with ``answered``, ``answered(request_id)`` when a node answers one;
        with ``live``, ``live(update)`` for each update another node sends its watchers
        without storing it; with ``watching``, ``watching(thread_id)`` when another node
        says it has watchers of the thread (``PostgresStore.follow_other_nodes``).
        ``nursery.start`` returns once it listens. Paused, the node hears nothing until it
        resumes; killed, it hears nothing more."""
        await self._reach()
        with self._shared.listen() as notes:
            task_status.started()
            async for channel, payload, sender in notes:
                while self._resumed is not None:
                    await self._resumed.wait()
                if self._killed:
                    break
                if channel == REQUESTED:
                    if requested is not None:
                        requested(payload)
                elif channel == ANSWERED:
                    if answered is not None:
                        answered(int(payload))
                elif sender is self:
                    continue  # its own
                elif channel == CHANGES:
                    thread_id, _, logged = payload.rpartition(" ")
                    changed(thread_id, int(logged))
                elif channel == updates.LIVE and live is not None:
                    live(updates.decode_live(json.loads(payload)[1]))
                elif channel == updates.WATCHING and watching is not None:
                    watching(json.loads(payload)[1])
        await trio.sleep_forever()  # killed: it hears nothing more (its tasks are the caller's)

    async def send_live(self, sent: Sequence[ThreadUpdateOrDelta]) -> None:
        """Send ``sent`` (never stored) to the other nodes' watchers of their threads."""
        await self._reach()
        db = self._shared.connect(self, autocommit=False)
        for payload in updates.live_payloads(self.node_id, sent):
            db.notify(updates.LIVE, payload)
        db.commit()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def announce_watching(self, thread_ids: Sequence[str]) -> None:
        """Tell the other nodes that this one has watchers of ``thread_ids``."""
        await self._reach()
        db = self._shared.connect(self, autocommit=False)
        for thread_id in sorted(set(thread_ids)):
            db.notify(updates.WATCHING, json.dumps([self.node_id, thread_id]))
        db.commit()
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def logged_since(self, thread_id: str, seq: int) -> list[updates.LoggedCommit]:
        """The changes of ``thread_id`` logged after the ``seq``-th, in commit order."""
        await self._reach()
        db = self._shared.connect(self, autocommit=True)
        logged = await updates.logged_since(db, thread_id, seq)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return logged

    async def last_logged(self, thread_id: str) -> int:
        """The number of the last change of ``thread_id`` in the log (0: none yet)."""
        await self._reach()
        last = await updates.last_logged(self._shared.connect(self, autocommit=True), thread_id)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return last

    async def forward(self, thread_id: str, request: dict[str, Any]) -> int:
        """Store ``request`` for the node that owns ``thread_id`` and wake it; its id."""
        await self._reach()
        db = self._shared.connect(self, autocommit=True)
        request_id = await requests.forward(db, thread_id, self.node_id, request)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return request_id

    async def open_requests(self, thread_id: str) -> list[tuple[int, dict[str, Any]]]:
        """The requests stored for ``thread_id`` that no node answered yet, oldest first."""
        await self._reach()
        db = self._shared.connect(self, autocommit=True)
        found = await requests.open_requests(db, thread_id)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return found

    async def answer(self, request_id: int, answer: dict[str, Any]) -> None:
        """Answer a request (the first answer stands) and wake the node that asked."""
        await self._reach()
        await requests.answer(self._shared.connect(self, autocommit=True), request_id, answer)
        await trio.lowlevel.cancel_shielded_checkpoint()

    async def take_answer(self, request_id: int) -> dict[str, Any] | None:
        """The answer to a request this node stored, deleting it; ``None`` while it has none."""
        await self._reach()
        db = self._shared.connect(self, autocommit=True)
        found = await requests.take_answer(db, request_id)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return found

    async def withdraw(self, request_id: int) -> None:
        """Delete a request this node stopped waiting for."""
        await self._reach()
        await requests.withdraw(self._shared.connect(self, autocommit=True), request_id)
        await trio.lowlevel.cancel_shielded_checkpoint()

    # -- reads: the shared data as last committed ---------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        await self._reach()
        return await self._data.get_thread(thread_id)

    async def list_threads(self, scope_key: str) -> list[ThreadRecord]:
        await self._reach()
        return await self._data.list_threads(scope_key)

    async def list_messages(self, thread_id: str) -> list[Message]:
        await self._reach()
        return await self._data.list_messages(thread_id)

    async def get_run(self, run_id: str) -> RunRecord | None:
        await self._reach()
        return await self._data.get_run(run_id)

    async def list_runs(self, thread_id: str) -> list[RunRecord]:
        await self._reach()
        return await self._data.list_runs(thread_id)

    async def get_active_run(self, thread_id: str) -> RunRecord | None:
        await self._reach()
        return await self._data.get_active_run(thread_id)

    async def get_call(self, thread_id: str, tool_call_id: str) -> StoredCall | None:
        await self._reach()
        return await self._data.get_call(thread_id, tool_call_id)

    async def list_calls(self, thread_id: str) -> list[StoredCall]:
        await self._reach()
        return await self._data.list_calls(thread_id)

    async def get_pending_action(self, thread_id: str, action_id: str) -> OpenAction | None:
        await self._reach()
        return await self._data.get_pending_action(thread_id, action_id)

    async def list_pending_actions(self, thread_id: str) -> list[OpenAction]:
        await self._reach()
        return await self._data.list_pending_actions(thread_id)

    async def list_scope_pending_actions(self, scope_key: str) -> list[OpenAction]:
        await self._reach()
        return await self._data.list_scope_pending_actions(scope_key)

    async def list_expiring_actions(
        self, *, until: datetime | None = None, limit: int | None = None
    ) -> list[OpenAction]:
        await self._reach()
        return await self._data.list_expiring_actions(until=until, limit=limit)

    async def list_tool_data(
        self, thread_id: str, tool_call_id: str, channel: str
    ) -> list[ToolDataItem]:
        await self._reach()
        return await self._data.list_tool_data(thread_id, tool_call_id, channel)

    async def read_file(self, file_id: str, *, scope_key: str) -> StoredFileBody | None:
        await self._reach()
        return await self._data.read_file(file_id, scope_key=scope_key)


async def keep_node(
    rt: AgentRuntime,
    store: NodeStore,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A node's duties beside its runtime, as ``pai-actors serve --node-id`` runs them
    (``_cli.serve.keep_node``, which is for a ``PostgresStore``): keep its leases
    (:meth:`NodeStore.keep_leases`), and every half lease load the threads whose runs a
    stopped node left running (their leases expired), which recovers them as a restart
    does; the first node to write such a thread takes it. ``nursery.start`` returns after
    the first renewal. A killed node's duties stop."""
    async with trio.open_nursery() as nursery:
        await nursery.start(store.keep_leases)
        task_status.started()
        while not store.killed:
            try:
                orphaned = await store.orphaned_threads()
            except PaiError:  # (killed meanwhile: the loop ends)
                orphaned = []
            for thread_id in orphaned:
                try:
                    await rt.get_state(thread_id)
                except PaiError:  # another node took it first, or it cannot load here
                    _log.info("taking over thread %r failed", thread_id, exc_info=True)
            await trio.sleep(store.lease / 2)


def create_node_runtime(
    agents: AgentDefinition | Pai,
    *,
    model: Model | str | Mapping[str, Model | str],
    store: NodeStore,
    **options: Any,
) -> AgentRuntime:
    """A test runtime for one node, as :func:`~pai_actors.testing.create_test_runtime`
    makes (the scripted ``model``, plain ``def`` tools inline, timestamps from trio's
    clock; ``options`` as it takes them), with ids no other node's runtime makes: the
    ``n``-th runtime opened on node ``a`` numbers them after ``a<n>``: threads
    ``thread_a1_1``, ..., and within a thread another runtime made, ``run_b1_1_a1_1``.

    (``create_test_runtime`` numbers ids from the data it is given when it is created:
    two nodes opened together on the same data would make the same run and message ids in
    a thread each writes, and one's commit would conflict with the other's.)"""
    prefix = store.shared.runtime_prefix(store.node_id)
    options.setdefault("clock", trio_clock())
    options.setdefault("sync_tools", "inline")
    return create_agent_runtime(
        agents, store=store, model=model, new_id=counter_ids(prefix), **options
    )
