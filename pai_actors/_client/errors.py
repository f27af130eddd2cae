"""The errors the protocol client raises (a module of their own: the client and its
threads both raise them).

``ClientError`` (a :class:`~pai_actors.PaiError`)
 ├── ``ServerError``: the server answered with an error frame (``code``)
 ├── ``ConnectionLost``: the connection dropped with the request in flight
 └── ``AuthenticationFailed``: the server refused the token
"""

from __future__ import annotations

from .._core.errors import PaiError


class ClientError(PaiError):
    """Base of the errors the protocol client raises."""


class ServerError(ClientError):
    """The server answered a request with an error frame: ``code`` (``not-found``,
    ``thread-busy``, ``invalid-request``, ...; see the protocol reference) and its message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ConnectionLost(ClientError):
    """The connection dropped while a request was in flight; it may or may not have been
    carried out (read the state again before repeating it)."""


class AuthenticationFailed(ClientError):
    """The server refused the connection's credentials."""
