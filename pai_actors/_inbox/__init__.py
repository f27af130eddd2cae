"""The browser inbox: a page where a signed-in person answers the pending actions of their
scope, live (``docs/guides/inbox.md``).

:func:`inbox_app` is an ASGI application (Starlette, on trio through anyio) that the HTTP
server mounts at ``/inbox``; the page is plain HTML and JavaScript in ``static/``, with no
build step.
"""

from .app import inbox_app as inbox_app

__all__ = ["inbox_app"]
