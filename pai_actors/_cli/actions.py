"""``pai-actors actions list|submit|cancel|fail``: a human-in-the-loop inbox in the terminal.

It speaks the protocol as a client of a running ``pai-actors serve`` (``--url``, and the
bearer ``--token`` or ``$PAI_TOKEN``). ``submit`` shows the action's input and asks for the
answer when no ``--payload`` is given: field by field for an object of simple fields, else
as JSON. Each field's prompt shows what its part of the resume schema (which the protocol
sends with each action) allows: a range, a length, a pattern, the choices. Each answer is
checked against that part as soon as it is typed, and only that field is asked again; the
whole answer is then checked against the whole schema before it is sent, and the form
asked again while it is invalid (the server checks once more).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator

from .._client.client import open_client
from .._core.json import JsonValue
from .._core.pending import PendingActionView
from .._core.wire import iso

Ask = Callable[[str], str]
Say = Callable[[str], None]


class CommandError(Exception):
    """A command's input was wrong: the message is printed and the command exits 1."""


async def list_actions(
    url: str, token: str, thread_id: str | None, *, as_json: bool, say: Say
) -> None:
    async with open_client(url, token=token, reconnect=False) as client:
        actions = await client.pending_actions(thread_id)
    if as_json:
        say(
            json.dumps(
                [
                    {
                        "name": a.name,
                        "input": a.input,
                        "ref": a.ref.to_wire(),
                        "resumeSchema": a.resume_schema,
                        "expiresAt": None if a.expires_at is None else iso(a.expires_at),
                    }
                    | (
                        {"originChain": [link.to_wire() for link in a.origin_chain]}
                        if a.origin_chain
                        else {}
                    )
                    for a in actions
                ],
                indent=2,
            )
        )
        return
    if not actions:
        say("no pending actions")
        return
    for action in actions:
        say(describe(action))


def describe(action: PendingActionView) -> str:
    ref = action.ref
    expires = "" if action.expires_at is None else f"\n    expires: {iso(action.expires_at)}"
    # which agent asks, and why: each tool call that started a sub-agent, outermost first
    via = "".join(
        f"\n    via: {link.tool_name} ({link.tool_call_id} in thread {link.thread_id})"
        f" -> agent {link.agent_id}"
        for link in action.origin_chain
    )
    return (
        f"{ref.action_id}  {action.name}  (thread {ref.thread_id}, run {ref.run_id}){via}\n"
        f"    input: {json.dumps(action.input, ensure_ascii=False)}\n"
        f"    answer: {schema_summary(action.resume_schema)}{expires}"
    )


def schema_summary(schema: JsonValue) -> str:
    if not isinstance(schema, dict):
        return "any JSON value"
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, dict):
        required = schema.get("required") or []
        fields = [
            f"{name}{'' if isinstance(required, list) and name in required else '?'}: "
            f"{_field_summary(field)}"
            for name, field in properties.items()
        ]
        return "{" + ", ".join(fields) + "}"
    return json.dumps(schema)


def _field_summary(field: JsonValue) -> str:
    """``integer (1..9)``; ``one of EUR, USD`` for a field with choices and no type."""
    kind, parts = _type_of(field), constraints(field)
    if kind == "any" and parts:
        return ", ".join(parts)
    return f"{kind} ({', '.join(parts)})" if parts else kind


def constraints(field: JsonValue) -> list[str]:
    """What the JSON Schema ``field`` allows beyond its type, in words a person reads in a
    prompt: ``1..9``, ``> 0 and <= 100``, ``a multiple of 5``, ``3..40 characters``,
    ``matching ^[A-Z]{3}$``, ``one of EUR, USD``, ``only true``."""
    if not isinstance(field, dict):
        return []
    parts: list[str] = []
    low, high = field.get("minimum"), field.get("maximum")
    above, below = field.get("exclusiveMinimum"), field.get("exclusiveMaximum")
    if _is_number(low) and _is_number(high) and above is None and below is None:
        parts.append(f"{_json(low)}..{_json(high)}")
    else:
        bounds = [
            f"{sign} {_json(bound)}"
            for sign, bound in ((">=", low), (">", above), ("<=", high), ("<", below))
            if _is_number(bound)
        ]
        if bounds:
            parts.append(" and ".join(bounds))
    if _is_number(field.get("multipleOf")):
        parts.append(f"a multiple of {_json(field['multipleOf'])}")
    shortest, longest = field.get("minLength"), field.get("maxLength")
    if isinstance(shortest, int) and isinstance(longest, int):
        count = f"{shortest}" if shortest == longest else f"{shortest}..{longest}"
        parts.append(f"{'exactly ' if shortest == longest else ''}{count} characters")
    elif isinstance(shortest, int):
        parts.append(f"at least {_characters(shortest)}")
    elif isinstance(longest, int):
        parts.append(f"at most {_characters(longest)}")
    if isinstance(field.get("pattern"), str):
        parts.append(f"matching {field['pattern']}")
    choices = field.get("enum")
    if isinstance(choices, list):
        parts.append(f"one of {_choices(choices)}")
    if "const" in field:
        parts.append(f"only {_choices([field['const']])}")
    return parts


def _is_number(value: JsonValue) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def _characters(count: int) -> str:
    return f"{count} character{'' if count == 1 else 's'}"


def _choices(values: list[JsonValue]) -> str:
    """Choices as a person types them: strings bare (``EUR, USD``) unless one of them would
    read ambiguously so (empty, padded, with a comma or a character JSON escapes), then all
    as JSON (``"", "a, b"``)."""
    bare = all(
        isinstance(v, str) and v and v.strip() == v and "," not in v and v == _json(v)[1:-1]
        for v in values
    )
    return ", ".join(str(v) if bare else _json(v) for v in values)


def _type_of(field: JsonValue) -> str:
    if isinstance(field, dict):
        kind = field.get("type")
        if isinstance(kind, list):
            return " | ".join(map(str, kind))
        if kind is not None:
            return str(kind)
    return "any"


async def resolve(
    url: str,
    token: str,
    verb: str,
    action_id: str,
    *,
    thread_id: str | None = None,
    payload: str | None,
    reason: str | None,
    error: str | None,
    ask: Ask,
    say: Say,
) -> bool:
    """Submit, cancel or fail the pending action ``action_id`` (of ``thread_id``, which is
    needed when threads of the scope hold actions with the same id); whether it was
    accepted."""
    async with open_client(url, token=token, reconnect=False) as client:
        pending = await client.pending_actions(thread_id)
        matches = [a for a in pending if a.ref.action_id == action_id]
        if not matches:
            known = ", ".join(sorted({a.ref.action_id for a in pending})) or "none"
            where = "your scope" if thread_id is None else f"thread {thread_id!r}"
            raise CommandError(
                f"no pending action {action_id!r} in {where} (pending: {known}); "
                "run `pai-actors actions list`"
            )
        if len(matches) > 1:
            threads = ", ".join(a.ref.thread_id for a in matches)
            raise CommandError(
                f"{len(matches)} threads have a pending action {action_id!r} ({threads}); "
                "say which with --thread THREAD_ID"
            )
        [action] = matches
        say(describe(action))
        if verb == "submit":
            value = _payload(action, payload, ask, say)
            result = await action.submit(value)
        elif verb == "cancel":
            result = await action.cancel(reason)
        else:
            assert error is not None
            result = await action.fail(error)
    if result.status == "accepted":
        say(f"{verb}: accepted")
        return True
    say(f"{verb}: rejected: {result.error}")
    return False


def _payload(action: PendingActionView, given: str | None, ask: Ask, say: Say) -> JsonValue:
    schema = action.resume_schema
    if given is None:
        return ask_payload(schema, ask, say)
    try:
        value: JsonValue = json.loads(given)
    except ValueError as exc:
        raise CommandError(
            f"--payload is not JSON ({exc}); e.g. --payload '{{\"approved\": true}}'"
        ) from None
    problems = _problems(_validator(schema), value)
    if problems:
        raise CommandError(f"the payload does not match the action's schema:\n{problems}")
    return value


def ask_payload(schema: JsonValue, ask: Ask, say: Say) -> JsonValue:
    """Ask for an answer that matches the JSON Schema ``schema`` (``None``: any JSON value):
    field by field for an object of simple fields, each checked against its own part of the
    schema as it is typed, else as one JSON value; asked again until the whole answer
    matches the whole schema."""
    validator = _validator(schema)
    while True:
        value = _ask_value(schema, validator, ask, say)
        problems = _problems(validator, value)
        if not problems:
            return value
        say(f"that answer does not match the action's schema:\n{problems}\ntry again")


def _validator(schema: JsonValue) -> Validator | None:
    return Draft202012Validator(schema) if isinstance(schema, dict) else None


def _problems(validator: Validator | None, value: JsonValue) -> str:
    """Each way ``value`` does not match, one indented line each; ``""`` when it matches."""
    problems = [] if validator is None else sorted(validator.iter_errors(value), key=str)
    return "\n".join(
        f"  {'/'.join(map(str, p.absolute_path)) or '(answer)'}: {p.message}" for p in problems
    )


_SIMPLE = ("boolean", "string", "number", "integer")
_HINTS = {"boolean": "y/n", "string": "text", "number": "a number", "integer": "a whole number"}


def _ask_value(schema: JsonValue, validator: Validator | None, ask: Ask, say: Say) -> JsonValue:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if (
        isinstance(schema, dict)
        and validator is not None
        and schema.get("type") == "object"
        and isinstance(properties, dict)
        and all(_simple_kind(f) is not None for f in properties.values())
    ):
        required = schema.get("required") or []
        value: dict[str, JsonValue] = {}
        for name, field in properties.items():
            assert isinstance(field, dict)
            optional = not (isinstance(required, list) and name in required)
            answer = _ask_field(name, field, validator.evolve(schema=field), optional, ask, say)
            if answer is not _SKIPPED:
                value[name] = answer
        return value
    answer = ask("answer (JSON): ")
    try:
        parsed_json: JsonValue = json.loads(answer)
    except ValueError:
        say(f"  {answer!r} is not JSON; reading it as a string")
        return answer
    return parsed_json


_SKIPPED: Any = object()
_INVALID: Any = object()


def _simple_kind(field: JsonValue) -> str | None:
    """The type a person types for ``field`` (``"boolean"``, ``"string"``, ...), also for a
    nullable one (``["string", "null"]``); ``None`` when it is not a simple field."""
    if not isinstance(field, dict):
        return None
    kind = field.get("type")
    if isinstance(kind, list) and len(kind) == 2 and kind.count("null") == 1:
        kind = kind[1] if kind[0] == "null" else kind[0]
    return kind if isinstance(kind, str) and kind in _SIMPLE else None


def _ask_field(
    name: str,
    field: dict[str, JsonValue],
    check: Validator,
    optional: bool,
    ask: Ask,
    say: Say,
) -> Any:
    """One field's answer, asked until it parses as the field's type and matches the field's
    schema (``check``, which resolves ``$ref`` as the whole schema does); ``_SKIPPED`` when
    an optional field is left empty."""
    kind = _simple_kind(field)
    assert kind is not None
    hint = _HINTS[kind]
    nullable = isinstance(field.get("type"), list)
    empty = "Enter to skip" if optional else "Enter for none" if nullable else None
    shown = [hint, *constraints(field), *([empty] if empty else [])]
    described = f" ({field['description']})" if field.get("description") else ""
    prompt = f"{name}{described} [{', '.join(shown)}]: "
    while True:
        answer = ask(prompt).strip()
        if not answer and optional:
            return _SKIPPED
        if not answer and nullable:
            return None
        parsed = _parse_field(kind, answer)
        if parsed is _INVALID:
            say(f"  {answer!r} is not {hint}")
            continue
        problems = sorted(error.message for error in check.iter_errors(parsed))
        if not problems:
            return parsed
        for problem in problems:
            say(f"  {problem}")


def _parse_field(kind: str, answer: str) -> Any:
    if kind == "boolean":
        lowered = answer.lower()
        if lowered in ("y", "yes", "true"):
            return True
        if lowered in ("n", "no", "false"):
            return False
        return _INVALID
    if kind == "string":
        return answer
    try:
        number = int(answer) if kind == "integer" else float(answer)
    except ValueError:
        return _INVALID
    return number if math.isfinite(number) else _INVALID  # not nan, inf: JSON has none
