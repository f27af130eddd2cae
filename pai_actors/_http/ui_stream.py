"""A thread in the AI SDK's UI message vocabulary, and the stream of chunks that builds it
(sans-IO: wire dicts in, wire dicts out).

Storage keeps one assistant message per turn, a ``step-start`` part before each model
step, as a client of the AI SDK expects; a notification in the middle of a run splits its
turn, so :func:`ui_messages` shows the consecutive assistant messages after a user message
as one UI message, with the id of the first. pai's own facts, which the SDK's validator
would strip from a tool part, become data parts the validator keeps (see
:func:`turn_parts`).

:class:`TurnWriter` turns a turn's successive projections (the target) into the UI message
stream's chunks that bring a client's copy of the message there: a part the client lacks is
created, a part it has is moved forward (a tool part through its states, a text part by the
text appended), and nothing is sent twice. A writer starts from the parts the client holds
(those of the message a ``POST`` continues) or from nothing (a replay).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeAlias

from .._core.json import JsonValue
from .._core.parts import message_steps

Chunk: TypeAlias = dict[str, JsonValue]
Key: TypeAlias = tuple[str, ...]
StepKey: TypeAlias = tuple[str, int]
"""A model step: its assistant message's id, its index in that message."""

STREAM_HEADERS = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",
}
"""The response headers of a UI message stream (the SDK's ``UI_MESSAGE_STREAM_HEADERS``)."""

ACTION = "pai-action"
SUSPENSION = "pai-suspension"
CANCELLED = "pai-cancelled"
RESERVED_PREFIX = "pai-"
"""Data part names (``data-<name>``) of pai's facts; a tool-data channel never starts so."""

FINISH_REASONS = {
    "completed": "stop",
    "waiting": "tool-calls",
    "failed": "error",
    "cancelled": "other",
}
"""The ``finish`` chunk's ``finishReason`` for each status a run's stream ends on."""

_STAGES = {
    "input-streaming": 0,
    "input-available": 1,
    "approval-requested": 2,
    "approval-responded": 3,
    "output-available": 4,
    "output-error": 4,
    "output-denied": 4,
}


def sse(chunk: Chunk | None) -> bytes:
    """One server-sent event: ``data: <chunk JSON>``, or ``data: [DONE]`` for ``None``."""
    data = "[DONE]" if chunk is None else json.dumps(chunk, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


# -- the projection ----------------------------------------------------------------------------


def ui_messages(
    thread_id: str,
    messages: Sequence[Mapping[str, Any]],
    pending: Mapping[str, Any],
    sub_actions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[dict[str, JsonValue]]:
    """A thread's wire messages as UI messages: each run of consecutive assistant messages
    one message (see :func:`turn_message`), the others as they are. ``pending``: the
    pending actions (the protocol's action wire) by tool call id; ``sub_actions``: those of
    sub-agent runs, by the id of the thread's call that started them."""
    out: list[dict[str, JsonValue]] = []
    group: list[Mapping[str, Any]] = []
    for message in messages:
        if message["role"] == "assistant":
            group.append(message)
            continue
        if group:
            out.append(turn_message(thread_id, group, pending, sub_actions=sub_actions))
            group = []
        out.append(dict(message))
    if group:
        out.append(turn_message(thread_id, group, pending, sub_actions=sub_actions))
    return out


def sub_actions_by_call(
    thread_id: str, actions: Sequence[Mapping[str, Any]]
) -> dict[str, list[Mapping[str, Any]]]:
    """The pending actions of sub-agent runs (those with an ``originChain``) among a
    thread's ``actions`` (the protocol's wire), by the id of the thread's own call that
    started the chain."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for action in actions:
        chain = action.get("originChain") or ()
        if chain and chain[0]["threadId"] == thread_id:
            out.setdefault(chain[0]["toolCallId"], []).append(action)
    return out


def turn_message(
    thread_id: str,
    messages: Sequence[Mapping[str, Any]],
    pending: Mapping[str, Any],
    live: Mapping[StepKey, Mapping[str, str]] | None = None,
    sub_actions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, JsonValue]:
    """One UI message of a turn's assistant messages, with the id of the first and
    ``metadata: {"pai": {"threadId"}}``; ``live``: the text and reasoning a step is
    streaming, by step; ``sub_actions``: the sub-agents' pending actions, by the calling
    call's id (see :func:`turn_parts`)."""
    steps = turn_steps(messages)
    parts = [part for _, part in turn_parts(steps, pending, live, sub_actions)]
    return {
        "id": messages[0]["id"],
        "role": "assistant",
        "parts": list[JsonValue](parts),
        "metadata": {"pai": {"threadId": thread_id}},
    }


def turn_steps(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The model steps of a turn's assistant messages (wire dicts), in order: each with
    ``key`` (its message's id, its index in that message) and ``parts`` (after its
    step-start part)."""
    return [
        {"key": (message["id"], n), "parts": [p for p in parts if p["type"] != "step-start"]}
        for message in messages
        for n, parts in enumerate(message_steps(message["parts"]))
    ]


def turn_parts(
    steps: Sequence[Mapping[str, Any]],
    pending: Mapping[str, Any],
    live: Mapping[StepKey, Mapping[str, str]] | None = None,
    sub_actions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> list[tuple[Key, dict[str, JsonValue]]]:
    """The parts of a turn's UI message, each with its key (what identifies it from one
    projection to the next): per step (of :func:`turn_steps`) a ``step-start``, its
    reasoning and text (``live`` text of a step not stored yet, ``state: "streaming"``), and
    per tool part the native part, then its data parts:

    - ``data-<channel>`` for each stored tool-data item, id ``<toolCallId>:<itemId>``, data
      ``{"toolCallId", "id", "value", "updatedAt"}``;
    - ``data-pai-suspension`` for each suspension episode, id its ``actionId``, data the
      episode (``suspensions[n]`` of the protocol) plus ``toolCallId`` and ``action`` (the
      pending action with its ``ref`` and ``resumeSchema`` while it is the one pending);
    - ``data-pai-action`` for the part's pending approval or output action, id its
      ``actionId``, data the pending action plus ``state: "pending"``;
    - ``data-pai-action`` for each pending action of the sub-agent runs the call started
      (``ctx.agents.run``, at any depth), id ``<threadId>:<actionId>`` of the sub-agent's
      thread, data the pending action (with its ``originChain``) plus the calling
      ``toolCallId`` and ``state: "pending"``;
    - ``data-pai-cancelled`` for a cancelled call, id the ``toolCallId``.
    """
    live = live or {}
    sub_actions = sub_actions or {}
    out: list[tuple[Key, dict[str, JsonValue]]] = []
    stored = {step["key"] for step in steps}
    unstored = [{"key": key, "parts": []} for key in live if key not in stored]
    for n, step in enumerate([*steps, *unstored]):
        out.append((("step", str(n)), {"type": "step-start"}))
        fragments = live.get(step["key"])
        texty = any(part["type"] in ("text", "reasoning") for part in step["parts"])
        counts = {"text": 0, "reasoning": 0}
        if fragments and not texty:
            for kind in ("reasoning", "text"):
                if fragments.get(kind):
                    key = (kind, str(n), "0")
                    out.append((key, {"type": kind, "text": fragments[kind], "state": "streaming"}))
        for part in step["parts"]:
            kind = part["type"]
            if kind in counts:
                key = (kind, str(n), str(counts[kind]))
                counts[kind] += 1
                out.append((key, {**part, "state": "done"}))
            elif kind == "file":
                out.append((("file", str(n), part["url"]), dict(part)))
            elif "toolCallId" in part:
                typed = (fragments or {}).get(tool_input_key(part["toolCallId"]))
                call_id = part["toolCallId"]
                out.extend(_tool_parts(part, pending.get(call_id), typed))
                for action in sub_actions.get(call_id, ()):
                    ref = action["ref"]
                    part_id = f"{ref['threadId']}:{ref['actionId']}"
                    data = {"toolCallId": call_id, "state": "pending", **action}
                    out.append((("data", f"data-{ACTION}", part_id), _data(ACTION, part_id, data)))
    return out


def tool_input_key(tool_call_id: str) -> str:
    """Where a turn keeps the raw input text a call's model step streamed (live only)."""
    return f"tool-input:{tool_call_id}"


def _tool_parts(
    part: Mapping[str, Any], action: Mapping[str, Any] | None, typed: str | None = None
) -> Iterator[tuple[Key, dict[str, JsonValue]]]:
    call_id = part["toolCallId"]
    native = {
        k: v
        for k, v in part.items()
        if k in ("type", "toolName", "toolCallId", "state", "input", "rawInput", "output")
        or k in ("errorText", "approval")
    }
    if typed and part["state"] == "input-streaming":  # the raw input text streamed so far
        native["inputText"] = typed
    yield ("tool", call_id), native
    for channel, items in (part.get("data") or {}).items():
        for item in items:
            item_id = f"{call_id}:{item['id']}"
            data = {"toolCallId": call_id, **item}
            yield ("data", f"data-{channel}", item_id), _data(channel, item_id, data)
    action_id = None if action is None else action["ref"]["actionId"]
    for suspension in part.get("suspensions") or ():
        shown = action if suspension["actionId"] == action_id else None
        data = {"toolCallId": call_id, **suspension, "action": shown}
        yield (
            ("data", f"data-{SUSPENSION}", suspension["actionId"]),
            _data(SUSPENSION, suspension["actionId"], data),
        )
    if action is not None and action["ref"].get("suspendName") is None:
        data = {"toolCallId": call_id, "state": "pending", **action}
        yield ("data", f"data-{ACTION}", str(action_id)), _data(ACTION, str(action_id), data)
    if part.get("cancelled"):
        data = {"toolCallId": call_id, **part["cancelled"]}
        yield ("data", f"data-{CANCELLED}", call_id), _data(CANCELLED, call_id, data)


def _data(name: str, part_id: str, data: Mapping[str, Any]) -> dict[str, JsonValue]:
    return {"type": f"data-{name}", "id": part_id, "data": dict(data)}


def transient_chunk(update: Mapping[str, Any]) -> Chunk:
    """The chunk of a transient ``tool-data`` update: a ``data-<channel>`` chunk with
    ``transient: true`` (the client's ``onData`` sees it; the message never holds it)."""
    call_id, item = update["toolCallId"], update["item"]
    return {
        "type": f"data-{update['channel']}",
        "id": f"{call_id}:{item['id']}",
        "data": {"toolCallId": call_id, **item},
        "transient": True,
    }


def client_keys(parts: Sequence[Mapping[str, Any]]) -> list[tuple[Key, dict[str, JsonValue]]]:
    """The parts of a message a client sent back, keyed as :func:`turn_parts` keys them
    (steps and their text by position; tools by call id; data by type and id)."""
    out: list[tuple[Key, dict[str, JsonValue]]] = []
    step = -1
    counts = {"text": 0, "reasoning": 0}
    for part in parts:
        kind = part.get("type")
        if not isinstance(kind, str):
            continue
        if kind == "step-start":
            step += 1
            counts = {"text": 0, "reasoning": 0}
            out.append((("step", str(step)), dict(part)))
        elif kind in counts:
            # a part the client holds is complete for this stream, whatever its state
            out.append(((kind, str(step), str(counts[kind])), {**part, "state": "done"}))
            counts[kind] += 1
        elif kind.startswith("data-") and isinstance(part.get("id"), str):
            out.append((("data", kind, part["id"]), dict(part)))
        elif isinstance(part.get("toolCallId"), str):
            out.append((("tool", part["toolCallId"]), dict(part)))
        elif kind == "file" and isinstance(part.get("url"), str):
            out.append((("file", str(step), part["url"]), dict(part)))
    return out


# -- the stream --------------------------------------------------------------------------------


class TurnWriter:
    """The chunks that bring a client's copy of a turn's message to successive targets.

    ``shown``: the keyed parts the client holds (:func:`client_keys`), or none for a replay.
    :meth:`update` takes the next target (:func:`turn_parts`) and returns the chunks for
    what changed; :meth:`finish` ends the stream. Not shared between tasks.
    """

    def __init__(
        self,
        thread_id: str,
        shown: Sequence[tuple[Key, dict[str, JsonValue]]] = (),
    ) -> None:
        self.thread_id = thread_id
        self.message_id: str | None = None  # the turn's, once the ``start`` chunk said it
        self._shown: dict[Key, dict[str, JsonValue]] = dict(shown)
        self._started = False
        self._step_open = False
        self.finished = False

    def update(
        self, message_id: str | None, target: Sequence[tuple[Key, dict[str, Any]]]
    ) -> list[Chunk]:
        """The chunks that move the client's message to ``target`` (the message's id, once
        the turn has one: the ``start`` chunk waits for it)."""
        chunks: list[Chunk] = []
        if not self._started:
            if message_id is None and not target:
                return chunks
            chunks.append(self._start(message_id))
        present = set()
        for key, part in target:
            present.add(key)
            chunks.extend(self._part(key, part))
        for key, part in list(self._shown.items()):
            if key not in present and key[0] == "data" and key[1] == f"data-{ACTION}":
                data = part.get("data")
                if isinstance(data, dict) and data.get("state") == "pending":
                    resolved = {**part, "data": {**data, "state": "resolved"}}
                    self._shown[key] = resolved
                    chunks.append(resolved)
        return chunks

    def finish(self, run: Mapping[str, Any] | None) -> list[Chunk]:
        """The last chunks: ``finish-step``, an ``error`` for a failed run, and ``finish``
        with the run's facts in ``messageMetadata.pai.run``."""
        chunks: list[Chunk] = []
        if not self._started:
            chunks.append(self._start(None))
        if self._step_open:
            chunks.append({"type": "finish-step"})
            self._step_open = False
        status = None if run is None else run.get("status")
        if run is not None and status == "failed":
            chunks.append({"type": "error", "errorText": run.get("error") or "the run failed"})
        finish: Chunk = {"type": "finish"}
        if status in FINISH_REASONS:
            finish["finishReason"] = FINISH_REASONS[status]
        if run is not None:
            finish["messageMetadata"] = {"pai": {"threadId": self.thread_id, "run": dict(run)}}
        chunks.append(finish)
        self.finished = True
        return chunks

    def _start(self, message_id: str | None) -> Chunk:
        self._started = True
        chunk: Chunk = {"type": "start"}
        if message_id is not None:
            self.message_id = message_id
            chunk["messageId"] = message_id
        chunk["messageMetadata"] = {"pai": {"threadId": self.thread_id}}
        return chunk

    def _part(self, key: Key, part: dict[str, Any]) -> list[Chunk]:
        kind = key[0]
        before = self._shown.get(key)
        if kind == "step":
            if before is not None:
                return []
            self._shown[key] = part
            chunks: list[Chunk] = [{"type": "finish-step"}] if self._step_open else []
            self._step_open = True
            return [*chunks, {"type": "start-step"}]
        if kind in ("text", "reasoning"):
            return self._text(key, part, before)
        if kind == "tool":
            return self._tool(key, part, before)
        if kind == "data":
            if before is not None and before.get("data") == part["data"]:
                return []
            self._shown[key] = part
            return [dict(part)]
        return []  # a user's file, or a part kind no chunk makes: never sent

    def _text(self, key: Key, part: dict[str, Any], before: dict[str, Any] | None) -> list[Chunk]:
        kind, chunk_id = key[0], "-".join(key)
        chunks: list[Chunk] = []
        text: str = part["text"]
        if before is None:
            chunks.append({"type": f"{kind}-start", "id": chunk_id})
            said = ""
        elif before.get("state") == "done":
            return []
        else:
            said = before["text"]
        if text.startswith(said) and len(text) > len(said):
            chunks.append({"type": f"{kind}-delta", "id": chunk_id, "delta": text[len(said) :]})
        else:
            text = said  # a stored text that is no continuation of the streamed one: kept
        done = part.get("state") == "done"
        if done:
            end: Chunk = {"type": f"{kind}-end", "id": chunk_id}
            if part.get("providerMetadata"):
                end["providerMetadata"] = part["providerMetadata"]
            chunks.append(end)
        self._shown[key] = {**part, "text": text, "state": "done" if done else "streaming"}
        return chunks

    def _input_text(
        self, key: Key, part: dict[str, Any], before: dict[str, Any] | None
    ) -> list[Chunk]:
        """A streaming call's input: the raw text the model wrote since the client got the
        last of it, as a ``tool-input-delta`` (none when no text streamed live: a stream
        rebuilt from stored state sends the input whole, with ``tool-input-available``)."""
        said = "" if before is None else str(before.get("inputText") or "")
        typed = str(part.get("inputText") or "")
        self._shown[key] = {**part, "inputText": typed if typed.startswith(said) else said}
        if len(typed) <= len(said) or not typed.startswith(said):
            return []
        return [
            {
                "type": "tool-input-delta",
                "toolCallId": part["toolCallId"],
                "inputTextDelta": typed[len(said) :],
            }
        ]

    def _tool(self, key: Key, part: dict[str, Any], before: dict[str, Any] | None) -> list[Chunk]:
        state = part["state"]
        target = _STAGES[state]
        shown = -1 if before is None else _STAGES.get(before.get("state", ""), -1)
        if target == shown == 0 and before is not None:  # its input streams on
            return self._input_text(key, part, before)
        if target <= shown:  # the client is there (it answered), or ahead: nothing to send
            return []
        call_id = part["toolCallId"]
        name = part["toolName"] if part["type"] == "dynamic-tool" else part["type"][5:]
        head: Chunk = {"toolCallId": call_id, "toolName": name}
        if part["type"] == "dynamic-tool":
            head["dynamic"] = True
        approval = part.get("approval")
        chunks: list[Chunk] = []
        if shown < 0 and target == 0:
            chunks.append({"type": "tool-input-start", **head})
            return [*chunks, *self._input_text(key, part, None)]
        if shown < 1 <= target:
            if state == "output-error" and "input" not in part:  # the model's input was invalid
                chunks.append(
                    {
                        "type": "tool-input-error",
                        **head,
                        "input": part.get("rawInput"),
                        "errorText": part["errorText"],
                    }
                )
                self._shown[key] = part
                return chunks
            chunks.append({"type": "tool-input-available", **head, "input": part.get("input")})
        answering = state in ("approval-responded", "output-denied")
        if approval is not None and shown < 2 <= target and (answering or target == 2):
            chunks.append(
                {
                    "type": "tool-approval-request",
                    "approvalId": approval["id"],
                    "toolCallId": call_id,
                }
            )
        if (
            approval is not None
            and "approved" in approval
            and shown < 3 <= target
            and (answering or shown == 2)
        ):
            response: Chunk = {
                "type": "tool-approval-response",
                "approvalId": approval["id"],
                "approved": approval["approved"],
            }
            if approval.get("reason") is not None:
                response["reason"] = approval["reason"]
            chunks.append(response)
        if target == 4:
            if state == "output-available":
                chunks.append(
                    {
                        "type": "tool-output-available",
                        "toolCallId": call_id,
                        "output": part["output"],
                    }
                )
            elif state == "output-error":
                chunks.append(
                    {
                        "type": "tool-output-error",
                        "toolCallId": call_id,
                        "errorText": part["errorText"],
                    }
                )
            else:
                chunks.append({"type": "tool-output-denied", "toolCallId": call_id})
        self._shown[key] = part
        return chunks
