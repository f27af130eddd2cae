"""The live tree: one node per actor or supervisor, and its read-only views.

Nodes are internal bookkeeping (plain classes, mutated only on the trio thread). The public
views are :class:`ActorInfo`, :class:`ActorSnapshot`, :class:`TreeSnapshot` and
:class:`ExitRecord`, all frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

import trio

from ._exit import ExitReason
from ._mailbox_statistics import MailboxStatistics

NodeKind: TypeAlias = Literal["actor", "supervisor"]
NodeState: TypeAlias = Literal["running", "stopping", "exited"]


@dataclass(frozen=True, slots=True)
class ActorInfo:
    """Who an actor (or supervisor) is: stable for its whole life."""

    id: int
    """Unique within its tree, assigned in spawn order (deterministic)."""
    name: str
    kind: NodeKind
    parent_id: int | None
    path: str
    """Names from the root, joined by ``/``: ``"app/pool/worker-1"``."""


@dataclass(frozen=True, slots=True)
class ExitRecord:
    """One actor's exit, as delivered to exit listeners."""

    actor: ActorInfo
    reason: ExitReason
    at: float
    """``trio.current_time()`` at exit."""


@dataclass(frozen=True, slots=True)
class ActorSnapshot:
    """One live node in a :class:`TreeSnapshot`."""

    actor: ActorInfo
    state: NodeState
    mailbox_depth: int | None
    """Messages waiting; ``None`` for supervisors, which have no mailbox."""
    mailbox_capacity: int | None
    restarts: int
    """How many times the supervisor restarted this child (its incarnation number)."""


@dataclass(frozen=True, slots=True)
class TreeSnapshot:
    """Every live node under (and including) a supervisor, parents before children."""

    actors: tuple[ActorSnapshot, ...]

    def render(self) -> str:
        """The tree as text, one line per node with its state and mailbox depth."""

        def label(a: ActorSnapshot) -> str:
            text = f"{a.actor.kind} {a.actor.name} [{a.state}]"
            if a.mailbox_depth is not None:
                text += f" mailbox {a.mailbox_depth}/{a.mailbox_capacity}"
            if a.restarts:
                text += f" restarts={a.restarts}"
            return text

        return format_tree((a.actor, label(a)) for a in self.actors)


def format_tree(rows: Iterable[tuple[ActorInfo, str]]) -> str:
    """Draw ``(actor, label)`` rows as an indented tree; rows may come in any order.

    A row whose parent is not among the rows is drawn as a root. Siblings are ordered by id.
    """
    rows = list(rows)
    ids = {info.id for info, _ in rows}
    children: dict[int | None, list[tuple[ActorInfo, str]]] = {}
    for info, text in rows:
        parent = info.parent_id if info.parent_id in ids else None
        children.setdefault(parent, []).append((info, text))
    for siblings in children.values():
        siblings.sort(key=lambda row: row[0].id)

    lines: list[str] = []

    def draw(parent: int | None, prefix: str, top: bool) -> None:
        siblings = children.get(parent, [])
        for index, (info, text) in enumerate(siblings):
            last = index == len(siblings) - 1
            branch = "" if top else ("└── " if last else "├── ")
            lines.append(f"{prefix}{branch}{text}")
            extension = "" if top else ("    " if last else "│   ")
            draw(info.id, prefix + extension, False)

    draw(None, "", True)
    return "\n".join(lines)


ExitListener: TypeAlias = Callable[[ExitRecord], None]


# ``_ref`` and ``_mailbox`` import this module: a node names the two things of theirs it
# holds by what it needs of them.


class OwnMailbox(Protocol):
    """What a node needs of its actor's mailbox (a ``Mailbox``)."""

    def __len__(self) -> int: ...

    def statistics(self) -> MailboxStatistics: ...

    def _owner_exited(self, node: Node) -> None: ...


class PendingReply(Protocol):
    """What a node needs of an ask its actor has to answer (a ``Reply``)."""

    def _actor_exited(self, name: str, reason: ExitReason) -> None: ...


class Tree:
    """Shared by every node under one root: id allocation, and a fault plan in tests."""

    __slots__ = ("faults", "next_id")

    def __init__(self) -> None:
        self.next_id = 0
        self.faults: Any = None
        """The ``supervisors.testing.Faults`` attached in this tree, if any; ``None`` in
        production. Each supervisor reads it once, when it is opened (see ``Supervisor``)."""


class Node:
    """Internal record of one actor or supervisor. Only touched on the trio thread."""

    __slots__ = (
        "cancel_reason",
        "cancelled_explicitly",
        "children",
        "exit_event",
        "exit_reason",
        "id",
        "info",
        "kind",
        "listeners",
        "mailbox",
        "monitors",
        "name",
        "owner",
        "parent",
        "replies",
        "restarts",
        "scope",
        "state",
        "tree",
        "watching",
    )

    def __init__(
        self,
        *,
        name: str,
        kind: NodeKind,
        parent: Node | None,
        mailbox: OwnMailbox | None = None,
        restarts: int = 0,
    ) -> None:
        self.tree: Tree = parent.tree if parent is not None else Tree()
        self.id = self.tree.next_id
        self.tree.next_id += 1
        self.name = name
        self.kind = kind
        self.parent = parent
        self.mailbox = mailbox
        self.restarts = restarts
        self.children: dict[int, Node] | None = None  # made when the first child arrives
        # Made when first needed (see cancel_scope): an actor's when its task starts, or
        # earlier if it is stopped or cancelled first; a supervisor's is its nursery's.
        self.scope: trio.CancelScope | None = None
        self.state: NodeState = "running"
        self.exit_reason: ExitReason | None = None
        self.exit_event: trio.Event | None = None
        self.listeners: list[ExitListener] | None = None
        self.replies: set[PendingReply] | None = None
        self.monitors: dict[object, Callable[[ExitReason], None]] | None = None
        """Who watches this node: key -> deliver(reason)."""
        self.watching: dict[object, Callable[[], None]] | None = None
        """What this node watches: key -> cancel that monitor (run when this node exits)."""
        self.cancel_reason: str | None = None
        self.cancelled_explicitly = False
        self.info: ActorInfo | None = None
        self.owner: Any = None
        """The ``Supervisor`` running this actor; ``ActorRef.stop`` tells it (no restart)."""
        if parent is not None:
            if parent.children is None:
                parent.children = {}
            parent.children[self.id] = self

    def cancel_scope(self) -> trio.CancelScope:
        """The node's cancel scope, made on first use.

        A burst of spawns makes many actors before any of their tasks runs: each one's scope
        is made when its task starts, one object less per waiting actor for the cyclic GC.
        """
        scope = self.scope
        if scope is None:
            scope = self.scope = trio.CancelScope()
        return scope

    def actor_info(self) -> ActorInfo:
        if self.info is None:
            parent = self.parent
            path = f"{parent.actor_info().path}/{self.name}" if parent is not None else self.name
            self.info = ActorInfo(
                id=self.id,
                name=self.name,
                kind=self.kind,
                parent_id=parent.id if parent is not None else None,
                path=path,
            )
        return self.info

    def snapshot_into(self, out: list[ActorSnapshot]) -> None:
        mailbox = self.mailbox
        state: NodeState = self.state
        out.append(
            ActorSnapshot(
                actor=self.actor_info(),
                state=state,
                mailbox_depth=len(mailbox) if mailbox is not None else None,
                mailbox_capacity=mailbox.statistics().capacity if mailbox is not None else None,
                restarts=self.restarts,
            )
        )
        if self.children:
            for child in list(self.children.values()):
                child.snapshot_into(out)

    def record_exit(self, reason: ExitReason) -> None:
        """Set the one exit reason and do the bookkeeping; runs no user callback.

        Pending asks fail, ``wait_exit`` callers wake, the node leaves the live tree and its
        own monitors of other actors end. :meth:`notify_exit` then tells monitors and
        listeners, once the supervisor has also made its decision.
        """
        assert self.exit_reason is None, f"{self.name!r} exited twice"
        self.exit_reason = reason
        self.state = "exited"
        if self.replies:
            for reply in list(self.replies):
                reply._actor_exited(self.name, reason)
            self.replies = None
        if self.exit_event is not None:
            self.exit_event.set()
        if self.watching:
            for cancel in list(self.watching.values()):
                cancel()
        mailbox = self.mailbox
        if mailbox is not None:  # no loop of references outlives the actor
            self.mailbox = None
            mailbox._owner_exited(self)
        parent = self.parent
        if parent is not None and parent.children is not None:
            del parent.children[self.id]

    def notify_exit(self) -> list[BaseException]:
        """Deliver exit notices, then call exit listeners here and above, in that order.

        Returns what listeners raised (each listener is still called): the caller decides
        how to raise it without losing an exception that is already propagating.
        """
        reason = self.exit_reason
        assert reason is not None
        if self.monitors:
            monitors, self.monitors = self.monitors, None
            for notify in monitors.values():
                notify(reason)
        errors: list[BaseException] = []
        node: Node | None = self
        record: ExitRecord | None = None
        while node is not None:
            if node.listeners:
                if record is None:
                    record = ExitRecord(self.actor_info(), reason, trio.current_time())
                for listener in node.listeners:
                    try:
                        listener(record)
                    except Exception as exc:  # raised by the caller, after the bookkeeping
                        errors.append(exc)
            node = node.parent
        return errors


# Which node a task is running: the actor's own task, or the task running a supervisor's
# body. A plain dict keyed by task rather than a ContextVar: setting a ContextVar in every
# actor task allocates two objects per actor that the garbage collector must then traverse.
_task_nodes: dict[trio.lowlevel.Task, Node] = {}


def current_node() -> Node | None:
    """The node of the current task, or of the nearest ancestor task that has one."""
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    while task is not None:
        node = _task_nodes.get(task)
        if node is not None:
            return node
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    return None


def enter_task(node: Node | None) -> Node | None:
    """Make ``node`` the current task's node; return the previous one (for ``exit_task``)."""
    task = trio.lowlevel.current_task()
    previous = _task_nodes.get(task)
    if node is None:
        _task_nodes.pop(task, None)
    else:
        _task_nodes[task] = node
    return previous


def exit_task(previous: Node | None) -> None:
    enter_task(previous)


def enter_actor_task(node: Node) -> trio.lowlevel.Task:
    """Make ``node`` the node of the current task, an actor's own; return the task.

    The actor's task had no node before, and hands the task to :func:`leave_actor_task`
    when it ends: one lookup of the current task per actor instead of four.
    """
    task = trio.lowlevel.current_task()
    _task_nodes[task] = node
    return task


def leave_actor_task(task: trio.lowlevel.Task) -> None:
    _task_nodes.pop(task, None)
