"""Server notifications: the message ``ctx.trigger`` (and ``AgentRuntime.trigger``) appends.

A notification is a ``system`` message with one text part and
``metadata["notification"] == {"hidden": bool, "data": <JSON>}``. Hidden ones are sent to the
model like the others but flagged for UIs, which may leave them out. Appending one asks the
runtime to continue generation on the thread: at once when the thread is idle, after its run
otherwise (a thread has one run at a time). A thread whose last message is a notification
has not been answered yet; a runtime that loads it goes on with it.
"""

from __future__ import annotations

from typing import Any

from .json import to_json_value
from .parts import Message, TextPart


def notification_message(message_id: str, notification: str, *, data: Any, hidden: bool) -> Message:
    """The ``system`` message for a notification; a misuse raises ``TypeError`` (and data
    that is not lossless JSON :class:`OutputNotJSON`)."""
    if not isinstance(notification, str) or not notification:
        raise TypeError(
            f"trigger() takes the notification as a non-empty str, got {notification!r}; "
            "e.g. ctx.trigger('Background export finished.', data={'fileId': ...})"
        )
    if not isinstance(hidden, bool):
        raise TypeError(f"trigger(hidden=...) takes True or False, got {hidden!r}")
    payload = {"hidden": hidden, "data": to_json_value(data, what="notification data")}
    return Message(
        id=message_id,
        role="system",
        parts=(TextPart(text=notification),),
        metadata={"notification": payload},
    )


def is_notification(message: Message) -> bool:
    """Whether ``message`` is a server notification."""
    return (
        message.role == "system"
        and message.metadata is not None
        and "notification" in message.metadata
    )
