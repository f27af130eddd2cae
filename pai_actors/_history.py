"""The model's view of a thread: model-facing messages built from the stored messages.

Only finished tool parts reach the model (a call still running or pending has no result to
show yet); a successful result goes through the tool's ``to_model_output`` (by default
``text`` for a ``str`` output, ``json`` otherwise), a failed or cancelled one is
``error-text`` with its ``errorText``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._model import (
    ModelAssistantMessage,
    ModelMessage,
    ModelSystemMessage,
    ModelTextPart,
    ModelToolCallPart,
    ModelToolMessage,
    ModelToolResultPart,
    ModelUserMessage,
    ToolResultOutput,
    check_tool_result_output,
)
from ._parts import Message, TextPart, ToolPart
from ._registration import ToolRegistration, call_callback


async def model_messages(
    messages: Sequence[Message], tools: Mapping[str, ToolRegistration]
) -> list[ModelMessage]:
    """The conversation as the model sees it."""
    out: list[ModelMessage] = []
    for message in messages:
        text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
        if message.role == "user":
            out.append(ModelUserMessage(text))
        elif message.role == "system":
            out.append(ModelSystemMessage(text))
        else:
            calls: list[ModelTextPart | ModelToolCallPart] = []
            results: list[ModelToolResultPart] = []
            for part in message.parts:
                if isinstance(part, TextPart):
                    calls.append(ModelTextPart(part.text))
                elif part.state in ("output-available", "output-error"):
                    given = part.input if part.raw_input is None else part.raw_input
                    calls.append(ModelToolCallPart(part.tool_call_id, part.tool_name, given))
                    output = await tool_result(part, tools.get(part.tool_name))
                    results.append(ModelToolResultPart(part.tool_call_id, part.tool_name, output))
            if calls:
                out.append(ModelAssistantMessage(calls))
            if results:
                out.append(ModelToolMessage(results))
    return out


async def tool_result(part: ToolPart, registration: ToolRegistration | None) -> ToolResultOutput:
    """What the model sees of one finished call."""
    if part.state != "output-available":
        return {"type": "error-text", "value": part.error_text or ""}
    convert = None if registration is None else registration.tool.config.to_model_output
    if convert is not None:
        value = await call_callback(
            convert, output=part.output, input=part.input, tool_call_id=part.tool_call_id
        )
        return check_tool_result_output(value, what=f"to_model_output of tool {part.tool_name!r}")
    if isinstance(part.output, str):
        return {"type": "text", "value": part.output}
    return {"type": "json", "value": part.output}
