"""The ASGI app (starlette) of the AI SDK's UI message stream protocol over a runtime;
``server.open_http_server`` serves it.

The endpoints (``docs/reference/ui-message-stream.md``), under ``/api/chat``:

- ``POST /api/chat``: what the SDK's ``DefaultChatTransport`` sends (``{id, messages,
  trigger, messageId}``). The chat ``id`` is the thread id (the thread is created in the
  caller's scope on the first ``POST``). A last message from the user starts a run with its
  text and files; a last message from the assistant carries the client's answers (approval
  responses, client tools' outputs, and the ``paiActions`` of the body), which are submitted
  before the stream continues that message. The answer is the turn's UI message stream.
- ``GET /api/chat/{id}/stream``: the stream of the run in progress, replayed from the turn's
  first part (the SDK's ``resume``); ``204`` when no run is going (also for a chat that
  does not exist yet, or is another scope's).
- ``GET /api/chat/{id}/messages``: the thread as UI messages, and its pending actions.
- ``POST /api/chat/{id}/actions/{actionId}``: answer a pending action (``{"resume": ...}``,
  ``{"cancel": reason}`` or ``{"fail": error}``).

Every request presents ``Authorization: Bearer <token>``; ``authenticate(token)`` (the same
hook as the WebSocket server's) makes it an :class:`~pai_actors.server.Identity`, and a
thread of another scope looks like one that does not exist (``404``). ``mounts`` maps path
prefixes to other ASGI apps served beside these endpoints.

Streams read the thread through the server's feeds (one runtime watch per thread, shared),
so a stream rebuilt after a restart starts from the stored state (the watch's snapshot)
and goes on with the live updates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from .._core.actions import ActionResult
from .._core.errors import AgentNotFound, MigrationRequired, PaiError, ThreadBusy
from .._core.parts import FilePart
from .._core.pending import PendingActionView
from .._protocol.frames import ClientToolSpec
from .._runtime.runtime import AgentRuntime
from .._server.feeds import FeedHub, state_actions, view_wire
from .._server.server import Authenticate, Identity, _client_tool
from .._tools.registration import call_callback
from .response import TurnResponse
from .turn import TurnFeed
from .ui_stream import client_keys, sub_actions_by_call, ui_messages

_log = logging.getLogger("pai_actors.http")


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return JSONResponse({"error": self.message}, self.status, headers=self.headers)


class _Endpoints:
    """The route handlers; see the module docstring."""

    def __init__(self, runtime: AgentRuntime, authenticate: Authenticate, hub: FeedHub) -> None:
        self._rt = runtime
        self._authenticate = authenticate
        self._hub = hub
        # the open streams' scopes: cancelled when the server shuts down
        self.streams: set[trio.CancelScope] = set()

    async def _identify(self, request: Request) -> Identity:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refused(
                401,
                "credentials required: send the header 'Authorization: Bearer <token>'",
                {"WWW-Authenticate": "Bearer"},
            )
        try:
            identity = await call_callback(self._authenticate, token.strip())
        except Exception:
            _log.exception("authenticate() raised; refusing the request")
            raise _Refused(500, "the server could not check the credentials") from None
        if identity is None:
            raise _Refused(401, "the token was refused", {"WWW-Authenticate": "Bearer"})
        if not isinstance(identity, Identity):
            _log.error("authenticate() returned %r, not an Identity or None", identity)
            raise _Refused(500, "the server could not check the credentials")
        return identity

    async def _owned(self, identity: Identity, chat_id: str) -> None:
        if await self._rt.thread_scope(chat_id) != identity.scope_key:
            raise _Refused(404, f"no chat {chat_id!r} in your scope")
        try:
            await self._rt.get_thread(chat_id)
        except (AgentNotFound, MigrationRequired) as exc:
            raise _Refused(409, str(exc)) from None

    async def chat(self, request: Request) -> Response:
        identity = await self._identify(request)
        body = await _json_object(request)
        chat_id, messages = body.get("id"), body.get("messages")
        if not isinstance(chat_id, str) or not isinstance(messages, list) or not messages:
            raise _Refused(400, "the body needs 'id' (the chat id) and a non-empty 'messages'")
        if body.get("trigger", "submit-message") != "submit-message":
            raise _Refused(
                400,
                f"trigger {body.get('trigger')!r} is not supported: a thread's history is the "
                "server's; send a new message (regenerate is not supported)",
            )
        last = messages[-1]
        if not isinstance(last, dict) or last.get("role") not in ("user", "assistant"):
            raise _Refused(400, "the last message must be a user or an assistant message")
        parts = last.get("parts")
        parts = (
            [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []
        )
        await self._thread(identity, chat_id)
        continued = last["role"] == "assistant"
        # Subscribed before the run starts (or resumes), so the stream misses none of its
        # live fragments (a call's input text is live only).
        subscriber, frames = await self._hub.subscribe(chat_id, None, deltas=True)
        try:
            answered = await self._answer(chat_id, parts if continued else [], body)
            run_id = None if continued else await self._send(identity, chat_id, parts, body)
        except BaseException:
            self._hub.unsubscribe(chat_id, subscriber)
            raise
        turn = TurnFeed(
            frames[0],
            client_keys(parts) if continued else (),
            run_id=run_id,
            message_id=str(last.get("id")) if continued else None,
            answered=answered,
        )
        return TurnResponse(self.streams, self._hub, turn, subscriber, frames[1:], self._settle)

    async def stream(self, request: Request) -> Response:
        identity = await self._identify(request)
        chat_id = request.path_params["chat_id"]
        if await self._rt.thread_scope(chat_id) != identity.scope_key:
            # Nothing to resume: a stock useChat with ``resume: true`` asks this of a new
            # chat when its page opens (a 404 would be an error it stops on). A chat of
            # another scope answers the same: it does not exist for this identity.
            return Response(status_code=204)
        await self._owned(identity, chat_id)
        subscriber, frames = await self._hub.subscribe(chat_id, None, deltas=True)
        turn = TurnFeed(frames[0])
        if not turn.running:
            self._hub.unsubscribe(chat_id, subscriber)
            return Response(status_code=204)
        return TurnResponse(self.streams, self._hub, turn, subscriber, frames[1:], self._settle)

    async def messages(self, request: Request) -> Response:
        identity = await self._identify(request)
        chat_id = request.path_params["chat_id"]
        await self._owned(identity, chat_id)
        state = await self._rt.get_state(chat_id)
        actions = state_actions(self._rt, state)
        pending = {action["ref"]["toolCallId"]: action for action in actions}  # type: ignore[index,call-overload]
        subs = [
            view_wire(view)
            for view in await self._rt.pending_actions(chat_id)
            if view.ref.thread_id != chat_id
        ]
        wire = state.to_wire()
        messages = ui_messages(
            chat_id,
            wire["messages"],  # type: ignore[arg-type]
            pending,  # type: ignore[arg-type]
            sub_actions_by_call(chat_id, subs),
        )
        return JSONResponse(
            {"messages": messages, "pendingActions": [*actions, *subs], "runs": wire["runs"]}
        )

    async def _settle(self, chat_id: str) -> tuple[str, list[Any]]:
        """Wait until the chat's tree of runs is idle (its sub-agents' included); its latest
        run's status then, and its pending actions with its sub-agents'."""
        await self._rt.wait_idle(chat_id)
        views = await self._rt.pending_actions(chat_id)
        runs = (await self._rt.get_state(chat_id)).runs
        return (runs[-1].status if runs else "completed"), [view_wire(v) for v in views]

    async def action(self, request: Request) -> Response:
        identity = await self._identify(request)
        chat_id = request.path_params["chat_id"]
        action_id = request.path_params["action_id"]
        await self._owned(identity, chat_id)
        body = await _json_object(request)
        view = _one_action(await self._rt.pending_actions(chat_id), chat_id, action_id, body)
        result = await _resolve(view, body)
        return JSONResponse(result.to_wire(), 200 if result.status == "accepted" else 422)

    async def _thread(self, identity: Identity, chat_id: str) -> None:
        """Create the chat's thread in the caller's scope, unless it exists (in it)."""
        if await self._rt.thread_scope(chat_id) is None:
            try:
                await self._rt.create_thread(
                    identity.scope_key, identity.user_key, thread_id=chat_id
                )
                return
            except PaiError as exc:
                if await self._rt.thread_scope(chat_id) is None:  # not a concurrent create
                    raise _Refused(400, str(exc)) from None
        await self._owned(identity, chat_id)

    async def _send(
        self, identity: Identity, chat_id: str, parts: list[dict[str, Any]], body: dict[str, Any]
    ) -> str:
        """Start a run with the user's message; its id."""
        text = "".join(
            p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)
        )
        try:
            files = [
                FilePart.model_validate(
                    {k: v for k, v in p.items() if k in ("type", "mediaType", "url", "filename")}
                )
                for p in parts
                if p.get("type") == "file"
            ]
            tools = [
                _client_tool(ClientToolSpec.model_validate(spec))
                for spec in body.get("clientTools") or ()
            ]
        except (ValueError, PaiError) as exc:
            raise _Refused(400, str(exc)) from None
        try:
            return await self._rt.send(
                chat_id,
                text,
                identity=identity.to_json(),
                client_data=body.get("clientData"),
                client_tools=tools,
                files=files,
            )
        except ThreadBusy as exc:
            raise _Refused(409, str(exc)) from None
        except PaiError as exc:
            raise _Refused(400, str(exc)) from None

    async def _answer(
        self, chat_id: str, parts: list[dict[str, Any]], body: dict[str, Any]
    ) -> frozenset[str]:
        """Submit the answers a request carries: the approval responses and client tools'
        outputs of the assistant message's ``parts``, and the body's ``paiActions``
        (``[{"actionId", "resume" | "cancel" | "fail"}]``); the ids of those accepted. A
        rejected answer refuses the request (``422``) with the rejections."""
        answers: list[tuple[str, dict[str, Any]]] = []
        for part in parts:
            state, approval = part.get("state"), part.get("approval")
            if state == "approval-responded" and isinstance(approval, dict):
                decision = {"approved": approval.get("approved"), "reason": approval.get("reason")}
                answers.append((str(approval.get("id")), {"resume": decision}))
            elif state == "output-available" and isinstance(part.get("toolCallId"), str):
                answers.append((part["toolCallId"], {"resume": part.get("output")}))
            elif state == "output-error" and isinstance(part.get("toolCallId"), str):
                answers.append((part["toolCallId"], {"fail": str(part.get("errorText"))}))
        extra = body.get("paiActions") or []
        if not isinstance(extra, list) or not all(
            isinstance(a, dict) and isinstance(a.get("actionId"), str) for a in extra
        ):
            raise _Refused(400, "paiActions is a list of {actionId, resume | cancel | fail}")
        explicit = [(a["actionId"], a) for a in extra]
        if not answers and not explicit:
            return frozenset()
        every = await self._rt.pending_actions(chat_id)
        # a part's answer is to the chat's own action (a sub-agent's may have the same id)
        views = {v.ref.action_id: v for v in every if v.ref.thread_id == chat_id}
        rejected: list[str] = []
        accepted: set[str] = set()
        for action_id, answer in answers:
            view = views.pop(action_id, None)
            if view is None:
                continue  # a part's answer already submitted (or never an action): nothing to do
            result = await _resolve(view, answer)
            if result.status == "accepted":
                accepted.add(action_id)
            else:
                rejected.append(f"{action_id}: {result.error}")
        for action_id, answer in explicit:  # the chat's own action, or a sub-agent's
            try:
                view = _one_action(every, chat_id, action_id, answer)
            except _Refused as refused:
                rejected.append(f"{action_id}: {refused.message}")
                continue
            result = await _resolve(view, answer)
            if result.status == "accepted":
                accepted.add(action_id)
            else:
                rejected.append(f"{action_id}: {result.error}")
        if rejected:
            raise _Refused(422, "rejected: " + "; ".join(rejected))
        return frozenset(accepted)


def _one_action(
    views: Sequence[PendingActionView], chat_id: str, action_id: str, body: Mapping[str, Any]
) -> PendingActionView:
    """The pending action ``action_id`` of the chat: its own, or a sub-agent's (an action id
    is unique within its thread only: the body's ``threadId`` names a sub-agent's thread
    when several have it)."""
    found = [v for v in views if v.ref.action_id == action_id]
    thread_id = body.get("threadId")
    if isinstance(thread_id, str):
        found = [v for v in found if v.ref.thread_id == thread_id]
    elif any(v.ref.thread_id == chat_id for v in found):
        found = [v for v in found if v.ref.thread_id == chat_id]
    if not found:
        raise _Refused(404, f"no pending action {action_id!r} in chat {chat_id!r}")
    if len(found) > 1:
        threads = ", ".join(repr(v.ref.thread_id) for v in found)
        raise _Refused(
            409,
            f"several sub-agents of chat {chat_id!r} have a pending action {action_id!r} "
            f"(threads {threads}); name one with 'threadId' in the body",
        )
    return found[0]


async def _resolve(view: PendingActionView, answer: Mapping[str, Any]) -> ActionResult:
    if "cancel" in answer:
        reason = answer["cancel"]
        return await view.cancel(None if reason is None else str(reason))
    if "fail" in answer:
        return await view.fail(str(answer["fail"]))
    if "resume" not in answer:
        return ActionResult.rejected("an answer has 'resume', 'cancel' or 'fail'")
    return await view.submit(answer["resume"])


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise _Refused(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise _Refused(400, "the body is not a JSON object")
    return body


def _handled(handler: Any) -> Any:
    async def endpoint(request: Request) -> Response:
        try:
            response: Response = await handler(request)
        except _Refused as refused:
            return refused.response()
        return response

    return endpoint


def create_app(
    runtime: AgentRuntime,
    authenticate: Authenticate,
    hub: FeedHub,
    *,
    mounts: Mapping[str, ASGIApp] | None = None,
) -> tuple[Starlette, set[trio.CancelScope]]:
    """The ASGI app: the UI message stream endpoints, and ``mounts`` beside them; and the
    set of its open streams' cancel scopes."""
    endpoints = _Endpoints(runtime, authenticate, hub)
    routes: list[Any] = [
        Route("/api/chat", _handled(endpoints.chat), methods=["POST"]),
        Route("/api/chat/{chat_id:path}/stream", _handled(endpoints.stream), methods=["GET"]),
        Route("/api/chat/{chat_id:path}/messages", _handled(endpoints.messages), methods=["GET"]),
        Route(
            "/api/chat/{chat_id:path}/actions/{action_id}",
            _handled(endpoints.action),
            methods=["POST"],
        ),
    ]
    for prefix, app in (mounts or {}).items():
        routes.append(Mount(prefix, app=app))
    return Starlette(routes=routes), endpoints.streams
