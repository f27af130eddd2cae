"""The exceptions of :mod:`pai_actors`.

Every exception this package raises to the application derives from one root::

    PaiError
    ├── DefinitionError          a definition (tool, registration, agent, capability token,
    │   │                        client tool) was built wrongly; raised at construction
    │   └── ToolDefinitionError  define_tool misuse, naming the tool and the argument
    ├── RuntimeConfigError       agents and bindings that cannot make one runtime: one tool id
    │                            with two wire specs, or a capability without a binding
    ├── ToolPreparationError     a registration or description callback failed while the
    │                            tools for a model step were prepared
    ├── SchemaError              a schema that cannot be used (not a type pydantic knows, an
    │                            invalid raw JSON Schema, no JSON Schema can be generated)
    ├── ValidationFailed         a value does not match its schema; ``errors`` lists each problem
    ├── OutputNotJSON            a value that does not round-trip through JSON losslessly
    ├── ModelProtocolError       a model message, event or event stream breaks the model protocol
    ├── ModelProviderError       a model provider failed a step: an HTTP error status, a rate
    │                            limit or timeout after the SDK's retries, a malformed stream
    ├── ScriptedModelError       a ScriptedModel (pai_actors.testing) was scripted wrongly or
    │                            ran out of steps
    ├── InvalidTransition        the runtime sent a tool-call event its state cannot take
    ├── ThreadNotFound           a runtime method named a thread that does not exist
    ├── FileNotFound             ctx.files.read of a file that is missing, or of another scope
    ├── FileTooLarge             ctx.files.save of a body over the runtime's size limit
    ├── ToolInvocationError      a nested child call failed or could not run
    ├── AgentNotFound            a thread names an agent the runtime does not host
    ├── AgentRunError            ctx.agents.run could not finish the other agent's run
    ├── MigrationRequired        a thread holds an unfinished call of a tool that is no
    │                            longer registered
    ├── ThreadBusy               send() on a thread whose run is still running or waiting
    ├── RuntimeClosed            a runtime method called after the runtime began to close
    ├── WatchOverflow            a watch fell too far behind the runtime and was dropped
    └── StoreError               a store cannot do what was asked (a transaction used after
        │                        it ended, a stored record of an unknown shape version)
        └── StoreConflict        a write disagrees with what is stored: a stale revision, a
                                 record created twice, an update of a missing record;
                                 nothing of its transaction was written
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

Loc: TypeAlias = tuple[str | int, ...]
"""Where a problem is inside a value: object keys and array indexes, outermost first."""


def format_path(what: str, loc: Loc) -> str:
    """``format_path("output", ("items", 2)) == "output['items'][2]"``."""
    return what + "".join(f"[{part!r}]" for part in loc)


class PaiError(Exception):
    """Root of every error raised by :mod:`pai_actors`."""


class DefinitionError(PaiError):
    """A definition (a tool, a capability token) was built wrongly.

    Raised at construction, by the function that builds the definition, so that misuse
    surfaces where it was written rather than when a model first calls the tool.
    """


class ToolDefinitionError(DefinitionError):
    """``define_tool`` was called with arguments that cannot make a tool.

    The message names the tool (once its id is known) and the offending argument. When a
    schema argument is the problem, the :class:`SchemaError` is the ``__cause__``.
    """


class RuntimeConfigError(PaiError):
    """The agents and bindings given to create a runtime cannot work together.

    Raised at runtime creation, before anything runs: two registered definitions share an
    ``id`` but not a wire spec (the message names the id, both registration paths and the
    fields that differ), or a capability that a tool or child declares has no binding (the
    message lists each missing capability and the tools that need it).
    """


class ToolPreparationError(PaiError):
    """A callback failed while an agent's tools were prepared for a model step.

    ``tool`` is the registration name (``None`` for the agent's ``runtime_context``),
    ``child`` the child's declared name when the failure was in a child registration, and
    ``callback`` which callback failed: ``"runtime_context"``, ``"enabled"``,
    ``"map_context"``, ``"description"`` or ``"to_model_output"`` (a converter failed while
    the history was prepared). The callback's exception is the ``__cause__``. A
    failed child resolution fails the preparation; it never reads as a disabled child.
    """

    def __init__(self, message: str, *, tool: str | None, child: str | None, callback: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.child = child
        self.callback = callback


class SchemaError(PaiError):
    """A schema object cannot be used.

    It is not a pydantic model or a type pydantic's ``TypeAdapter`` accepts, pydantic cannot
    generate a JSON Schema for it, or a raw JSON Schema given to ``json_schema`` is not a
    valid draft 2020-12 schema.
    """


@dataclass(frozen=True, slots=True)
class ValidationIssue:
    """One reason a value failed its schema.

    ``loc`` locates the offending part (object keys and array indexes, outermost first; empty
    for the value itself), ``message`` says what was expected, and ``kind`` is the validator's
    code for the problem (pydantic's error type such as ``"int_parsing"``, the JSON Schema
    keyword such as ``"required"``, or ``"not_json"``).
    """

    loc: Loc
    message: str
    kind: str


class ValidationFailed(PaiError):
    """A value does not match its schema.

    ``errors`` holds one :class:`ValidationIssue` per problem; the message lists them, one
    per line, each prefixed with its location (``input['items'][2]: ...``), so it can be shown
    to a model or a person as it is.
    """

    def __init__(self, what: str, errors: tuple[ValidationIssue, ...]) -> None:
        count = f"{len(errors)} error" + ("" if len(errors) == 1 else "s")
        lines = [f"{what} does not match its schema ({count}):"]
        lines += [f"  {format_path(what, e.loc)}: {e.message}" for e in errors]
        super().__init__("\n".join(lines))
        self.what = what
        self.errors = errors


class OutputNotJSON(PaiError):
    """A value cannot round-trip through JSON without loss.

    ``path`` names the offending part as Python would index it (``output['items'][2]``),
    ``loc`` is the same location as a tuple, and ``reason`` is the message without the path.
    """

    def __init__(self, what: str, loc: Loc, reason: str) -> None:
        self.path = format_path(what, loc)
        super().__init__(f"{self.path} {reason}")
        self.loc = loc
        self.reason = reason


class ModelProtocolError(PaiError):
    """Something on the model side breaks the model protocol (``pai_actors._core.model``).

    Raised when a model-facing message or event is built wrongly (a tool result ``output``
    that is not the AI SDK's ``{"type", "value"}`` shape, an unknown finish reason), and when
    a model's event stream breaks the protocol a step is read with: a ``ToolInputDelta`` for
    a call that never started, a ``ToolCallEvent`` whose input is not the JSON its deltas
    spelled, events after ``Finish``, or no ``Finish`` at all. The message names the event
    and says what a model must emit instead.
    """


class ModelProviderError(PaiError):
    """A model provider (``pai_actors.models``: OpenAI, Anthropic, an OpenAI-compatible
    server) could not give a model step.

    Raised by a model adapter's stream: the provider answered an HTTP error status (4xx,
    5xx; a rate limit once the SDK's retries are spent), the connection failed or timed
    out, or the stream was malformed (not the provider's format, cut off before its end, a
    tool call whose arguments are not JSON). The message names the provider, the status
    and what to do; it never holds an API key. ``provider`` is the provider's name
    (``"openai"``, ``"anthropic"``, or the name given to an OpenAI-compatible adapter),
    ``status`` the HTTP status (``None`` when there was no HTTP answer: a connection
    failure, a timeout, a malformed stream), ``code`` the provider's error type or code
    (``"rate_limit_error"``, ``"invalid_api_key"``, ``"timeout"``, ``"malformed_stream"``,
    ...) and ``retryable`` whether trying the step again later may succeed.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        code: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status
        self.code = code
        self.retryable = retryable


class ScriptedModelError(PaiError):
    """A :class:`pai_actors.testing.ScriptedModel` cannot serve a request.

    It was given a step it cannot play (raised at construction, or when a callable step
    returns one), it ran out of steps (the message says how many were scripted and which
    tools the request offered), or a step calls a tool the request did not offer (the
    message lists the offered tools).
    """


class InvalidTransition(PaiError):
    """A tool-call event arrived in a state that cannot take it (``_core.calls``' transitions).

    The runtime drives the call core; an event it should never send (an output while the
    call is suspended, a second suspension while one is pending) is a bug there, not in the
    application. Submissions from clients never raise this: they are accepted or rejected
    with an :class:`~pai_actors.ActionResult`.
    """


class StoreError(PaiError):
    """A :class:`~pai_actors.Store` cannot do what was asked.

    Raised for misuse of a transaction (staging a write after it committed or failed) and by
    backends for stored data they cannot read (an unknown shape version).
    """


class StoreConflict(StoreError):
    """A write disagrees with what the store holds, so its whole transaction was refused.

    A record written with a ``revision`` the store no longer holds (another writer got there
    first: read it again, re-apply the change, write again), a record created twice, or an
    update of a record (a thread, message, run) that does not exist. Nothing of the
    transaction was written. ``key`` names the record (``"call 'call_1'"``).
    """

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class ThreadOwnedElsewhere(StoreConflict):
    """A write to a thread that another node drives (a :class:`~pai_actors.PostgresStore`
    shared by several processes, each with its ``node_id``), or that this node drove until
    it lost its lease: nothing of the transaction was written. Not worth retrying at once:
    send the request to the owning node, or retry once its lease expired."""


class ThreadNotFound(PaiError):
    """A runtime method was given a ``thread_id`` that does not exist."""


class ThreadBusy(PaiError):
    """``send`` on a thread that already has an active (running or waiting) run."""


class RuntimeClosed(PaiError):
    """A runtime method was called after its ``async with`` block began to exit.

    Raised before anything is written; open a new runtime on the store to go on.
    """


class AgentRunError(PaiError):
    """``ctx.agents.run`` could not finish: the agent's model failed or broke the model
    protocol, or the agent took more than ``max_steps`` steps. ``agent_id`` names it."""

    def __init__(self, message: str, *, agent_id: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id


class FileNotFound(PaiError):
    """``ctx.files.read(file_id)`` found no file: it is missing, or it belongs to another
    scope (the two are indistinguishable on purpose). ``file_id`` is the id asked for."""

    def __init__(self, message: str, *, file_id: str) -> None:
        super().__init__(message)
        self.file_id = file_id


class FileTooLarge(PaiError):
    """``ctx.files.save`` was given a body over the runtime's limit; nothing was stored.
    ``size`` is the body's length, ``limit`` the largest accepted (bytes)."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class ToolInvocationError(PaiError):
    """A nested call (``await ctx.tools.<name>.execute(...)``) did not produce an output:
    the child is disabled for this invocation, its input or output failed its schema, it
    failed (``ctx.fail``, an exception: a generic message unless ``map_error`` gives one),
    it was aborted, or it was called after the parent returned. ``tool`` is the parent's
    registration name and ``child`` the child's declared name; ``aborted`` says whether the
    child was aborted (its ``abort_signal``, or the parent returning while it ran), and
    ``reason`` is then the abort's reason (``None`` if none was given)."""

    def __init__(
        self,
        message: str,
        *,
        tool: str,
        child: str,
        aborted: bool = False,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.tool = tool
        self.child = child
        self.aborted = aborted
        self.reason = reason


class AgentNotFound(PaiError):
    """A thread names an agent this runtime does not host.

    Raised by ``create_thread(agent_id=...)`` with an id the runtime's :class:`Pai` does not
    register, and when a stored thread whose agent is no longer registered is loaded (other
    threads are unaffected). ``agent_id`` is the missing id.
    """

    def __init__(self, message: str, *, agent_id: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id


class MigrationRequired(PaiError):
    """A thread holds an unfinished call of a tool this runtime no longer registers.

    Raised when that thread is loaded (``get_state``, ``pending_actions``, ``send``), never
    when the runtime opens; other threads are unaffected. ``tool_name`` is the missing
    registration name, ``tool_call_id`` the call. Register the tool again under that name
    (or migrate the stored call) to load the thread.
    """

    def __init__(self, message: str, *, thread_id: str, tool_name: str, tool_call_id: str) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.tool_name = tool_name
        self.tool_call_id = tool_call_id


class WatchOverflow(PaiError):
    """A watch (``AgentRuntime.watch``) fell more than its capacity of updates behind.

    The runtime never waits for a watcher: it dropped this one, and its next receive (after
    the updates already buffered) raises this. Read ``get_state`` again and watch anew.
    """
