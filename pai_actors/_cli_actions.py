"""``pai-actors actions list|submit|cancel|fail``: a human-in-the-loop inbox in the terminal.

It speaks the protocol as a client of a running ``pai-actors serve`` (``--url``, and the
bearer ``--token`` or ``$PAI_TOKEN``). ``submit`` shows the action's input and asks for the
answer when no ``--payload`` is given: field by field for an object of simple fields, else
as JSON. The answer is validated against the action's resume schema (which the protocol
sends with each action) before it is sent, and asked again while it is invalid.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from jsonschema import Draft202012Validator

from ._client import open_client
from ._json import JsonValue
from ._pending import PendingActionView

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
                    }
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
    return (
        f"{ref.action_id}  {action.name}  (thread {ref.thread_id}, run {ref.run_id})\n"
        f"    input: {json.dumps(action.input, ensure_ascii=False)}\n"
        f"    answer: {schema_summary(action.resume_schema)}"
    )


def schema_summary(schema: JsonValue) -> str:
    if not isinstance(schema, dict):
        return "any JSON value"
    properties = schema.get("properties")
    if schema.get("type") == "object" and isinstance(properties, dict):
        required = schema.get("required") or []
        fields = [
            f"{name}{'' if isinstance(required, list) and name in required else '?'}: "
            f"{_type_of(field)}"
            for name, field in properties.items()
        ]
        return "{" + ", ".join(fields) + "}"
    return json.dumps(schema)


def _type_of(field: JsonValue) -> str:
    if isinstance(field, dict):
        kind = field.get("type")
        if isinstance(kind, list):
            return " | ".join(map(str, kind))
        if kind is not None:
            return str(kind)
        if "enum" in field:
            return " | ".join(json.dumps(v) for v in field["enum"] or [])  # type: ignore[union-attr]
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
    validator = Draft202012Validator(schema) if isinstance(schema, dict) else None
    while True:
        if given is not None:
            try:
                value: JsonValue = json.loads(given)
            except ValueError as exc:
                raise CommandError(
                    f"--payload is not JSON ({exc}); e.g. --payload '{{\"approved\": true}}'"
                ) from None
        else:
            value = _ask_value(schema, ask, say)
        problems = [] if validator is None else sorted(validator.iter_errors(value), key=str)
        if not problems:
            return value
        lines = "\n".join(
            f"  {'/'.join(map(str, p.absolute_path)) or '(answer)'}: {p.message}" for p in problems
        )
        if given is not None:
            raise CommandError(f"the payload does not match the action's schema:\n{lines}")
        say(f"that answer does not match the action's schema:\n{lines}\ntry again")


def _ask_value(schema: JsonValue, ask: Ask, say: Say) -> JsonValue:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    simple = ("boolean", "string", "number", "integer")
    if (
        isinstance(schema, dict)
        and schema.get("type") == "object"
        and isinstance(properties, dict)
        and all(isinstance(f, dict) and f.get("type") in simple for f in properties.values())
    ):
        required = schema.get("required") or []
        value: dict[str, JsonValue] = {}
        for name, field in properties.items():
            assert isinstance(field, dict)
            optional = not (isinstance(required, list) and name in required)
            kind = str(field.get("type"))
            hint = {
                "boolean": "y/n",
                "string": "text",
                "number": "a number",
                "integer": "a whole number",
            }[kind]
            described = f" ({field['description']})" if field.get("description") else ""
            while True:
                answer = ask(
                    f"{name}{described} [{hint}{', Enter to skip' if optional else ''}]: "
                ).strip()
                if not answer and optional:
                    break
                parsed = _parse_field(kind, answer)
                if parsed is not _INVALID:
                    value[name] = parsed
                    break
                say(f"  {answer!r} is not {hint}")
        return value
    answer = ask("answer (JSON): ")
    try:
        parsed_json: JsonValue = json.loads(answer)
    except ValueError:
        say(f"  {answer!r} is not JSON; reading it as a string")
        return answer
    return parsed_json


_INVALID: Any = object()


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
        return int(answer) if kind == "integer" else float(answer)
    except ValueError:
        return _INVALID
