"""The frozen record a mailbox reports about itself (:class:`MailboxStatistics`).

A module of its own only to break an import cycle: ``ActorRef.statistics`` (in ``_ref``)
returns it and the tree's snapshots (in ``_node``) read it, and ``_mailbox`` imports both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    """A point-in-time record of a mailbox, from :meth:`Mailbox.statistics`."""

    capacity: int
    depth: int
    """Messages waiting to be received (notices included)."""
    sent: int
    """Messages accepted since the mailbox was made (notices included)."""
    received: int
    waiting_senders: int
    """Senders blocked in ``tell``/``ask`` because the mailbox is full."""
    waiting_receivers: int
    closed: bool
