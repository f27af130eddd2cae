"""The model's view of a thread: model-facing messages built from the stored messages.

An assistant message holds a turn: each of its model steps (split at its step-start parts)
becomes an assistant message of what the step said and called, then a tool message of its
finished calls' results, as the model wrote and received them.

Reasoning parts go back to the model as :class:`ModelReasoningPart` with their provider
metadata (an adapter gives back what its provider signed, and leaves out the rest). Only
finished tool parts reach the model (a call still running or pending has no result to
show yet); a successful result goes through the tool's ``to_model_output`` (by default
``text`` for a ``str`` output, ``json`` otherwise), a failed or cancelled one is
``error-text`` with its ``errorText``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._core.errors import ToolPreparationError
from .._core.json import JsonValue, to_json_value
from .._core.model import (
    ModelAssistantMessage,
    ModelFilePart,
    ModelMessage,
    ModelReasoningPart,
    ModelSystemMessage,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolMessage,
    ModelToolResultPart,
    ModelUserMessage,
    ToolResultOutput,
    check_tool_result_output,
)
from .._core.parts import (
    FilePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolPart,
    message_steps,
)
from .._tools.registration import ToolRegistration, call_callback


async def model_messages(
    messages: Sequence[Message], tools: Mapping[str, ToolRegistration]
) -> list[ModelMessage]:
    """The conversation as the model sees it."""
    out: list[ModelMessage] = []
    for message in messages:
        text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
        if message.role == "user":
            files = [
                ModelFilePart(part.media_type, part.url, part.filename)
                for part in message.parts
                if isinstance(part, FilePart)
            ]
            out.append(ModelUserMessage(text, files))
        elif message.role == "system":
            out.append(ModelSystemMessage(text))
        else:
            for step in message_steps(message.parts):  # one assistant turn, step by step
                out.extend(await _assistant_step(step, tools))
    return out


async def _assistant_step(
    parts: Sequence[Part], tools: Mapping[str, ToolRegistration]
) -> list[ModelMessage]:
    """One model step of an assistant message: what it said and called, then the results of
    its finished calls."""
    calls: list[ModelReasoningPart | ModelTextPart | ModelToolCallPart] = []
    results: list[ModelToolResultPart] = []
    for part in parts:
        if isinstance(part, TextPart):
            calls.append(ModelTextPart(part.text))
        elif isinstance(part, ReasoningPart):  # given back: a provider may need it
            calls.append(ModelReasoningPart(part.text, part.provider_metadata))
        elif isinstance(part, ToolPart) and part.state in (
            "output-available",
            "output-error",
            "output-denied",
        ):
            given = part.input if part.raw_input is None else part.raw_input
            calls.append(ModelToolCallPart(part.tool_call_id, part.tool_name, given))
            registration = None if part.type == "dynamic-tool" else tools.get(part.tool_name)
            output = await tool_result(part, registration)
            results.append(ModelToolResultPart(part.tool_call_id, part.tool_name, output))
    out: list[ModelMessage] = []
    if calls:
        out.append(ModelAssistantMessage(calls))
    if results:
        out.append(ModelToolMessage(results))
    return out


async def tool_result(part: ToolPart, registration: ToolRegistration | None) -> ToolResultOutput:
    """What the model sees of one finished call.

    A converter's exception, or a result that is neither the AI SDK shape (a dict with
    exactly ``type`` and ``value``) nor a JSON value, raises :class:`ToolPreparationError`
    (``callback="to_model_output"``): the history cannot be prepared, so the run fails.
    """
    if part.state == "output-denied":  # the user denied its approval: no execution
        reason = None if part.approval is None else part.approval.reason
        text = "The user denied this tool call" + (f": {reason}" if reason else ".")
        return {"type": "error-text", "value": text}
    if part.state != "output-available":
        return {"type": "error-text", "value": part.error_text or ""}
    convert = None if registration is None else registration.tool.config.to_model_output
    if convert is None:
        return bare_output(part.output)
    where = f"tool {part.tool_name!r} (call {part.tool_call_id!r})"
    try:
        value = await call_callback(
            convert, output=part.output, input=part.input, tool_call_id=part.tool_call_id
        )
        if isinstance(value, Mapping) and set(value) == {"type", "value"}:
            return check_tool_result_output(value, what=f"the to_model_output result of {where}")
        return bare_output(to_json_value(value, what=f"the to_model_output result of {where}"))
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ToolPreparationError(
            f"to_model_output of {where} failed ({problem}); the model's history could not be "
            "prepared, so the run fails. Fix the converter: it must return a JSON value or "
            '{"type": "text" | "json" | "content", "value": ...}',
            tool=part.tool_name,
            child=None,
            callback="to_model_output",
        ) from exc


def bare_output(value: JsonValue) -> ToolResultOutput:
    """A bare JSON value as the model sees it: a ``str`` is ``text``, anything else ``json``."""
    if isinstance(value, str):
        return {"type": "text", "value": value}
    return {"type": "json", "value": value}
