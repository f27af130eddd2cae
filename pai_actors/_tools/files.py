"""Files a tool saves: :class:`ScopedFiles`, the object a tool receives as ``ctx.files``.

A file's body is stored apart from the message log (``Transaction.save_file``); the message
log carries only what the tool returns, typically the ``file_id``. The runtime builds one
:class:`ScopedFiles` per call and binds it to the call's trusted scope key, user key and
thread: nothing a tool passes can change them, so tool input cannot pick another tenant,
forge who created a file, or claim another thread. Reads are authorised by scope: any
thread of the scope may read a file saved in it, and a file of another scope reads exactly
as a missing one does (:class:`~pai_actors.FileNotFound`).

Usage inside a tool's ``execute``::

    async def execute(ctx: ToolContext[...]) -> dict[str, str]:
        saved = await ctx.files.save(
            b"region,total\\nnorth,12\\n",
            "text/csv",
            "report.csv",
            metadata={"rows": 1},
        )
        return {"file_id": saved.file_id}  # the client renders a download from it

    # later, in this scope (another call, another thread of the same scope):
    stored = await ctx.files.read(file_id)
    stored.file.filename, stored.body  # 'report.csv', b'region,total\\nnorth,12\\n'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .._core.clock import Clock
from .._core.errors import FileNotFound, FileTooLarge
from .._core.json import JsonValue, to_json_value
from .._core.records import StoredFileBody, UploadedFile
from .._store.base import Store, Transaction

DEFAULT_MAX_FILE_BYTES = 16 * 1024 * 1024
"""The largest body :meth:`ScopedFiles.save` accepts unless the runtime sets another: 16 MiB."""

# RFC 6838 restricted names for the type and subtype; parameters (``; charset=utf-8``) are
# RFC 9110 tokens with a token or quoted-string value.
_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[^"\\\x00-\x1f\x7f]|\\[^\x00-\x1f\x7f])*"'
_MEDIA_TYPE = re.compile(rf"{_NAME}/{_NAME}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*")

_EXAMPLE_NAME = "report.csv"


class ScopedFiles:
    """Save and read durable files bound to one call's scope, creator and thread.

    :meth:`save` stores a body with a new :class:`~pai_actors.UploadedFile` record stamped
    with the injected ``scope_key``, ``user_key`` and ``thread_id`` (never the tool's);
    :meth:`read` returns a file of this scope, or raises :class:`~pai_actors.FileNotFound`
    for a missing file and for another scope's file alike. Arguments are checked before
    anything is stored: misuse raises ``TypeError`` / ``ValueError``, a body over
    ``max_bytes`` raises :class:`~pai_actors.FileTooLarge`, and metadata that is not
    lossless JSON raises :class:`~pai_actors.OutputNotJSON`; in each case nothing is stored.

    Concurrency: any number of tasks may use one instance at once. Each method is atomic
    with respect to cancellation, as the store's commit is: :meth:`save` either stored the
    whole file and returns its record, or raises (``trio.Cancelled`` included) having stored
    nothing; a cancelled :meth:`read` changed nothing.
    """

    __slots__ = (
        "_clock",
        "_max_bytes",
        "_new_id",
        "_scope_key",
        "_store",
        "_thread_id",
        "_transaction",
        "_user_key",
    )

    def __init__(
        self,
        *,
        store: Store,
        transaction: Callable[[], Transaction],
        scope_key: str,
        user_key: str | None,
        thread_id: str,
        new_id: Callable[[str], str],
        clock: Clock,
        max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    ) -> None:
        if not isinstance(scope_key, str):
            raise TypeError(f"scope_key must be a str, got {type(scope_key).__name__}")
        if user_key is not None and not isinstance(user_key, str):
            raise TypeError(f"user_key must be a str or None, got {type(user_key).__name__}")
        if not isinstance(thread_id, str):
            raise TypeError(f"thread_id must be a str, got {type(thread_id).__name__}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(
                f"max_bytes must be a positive int (a number of bytes), got {max_bytes!r}; "
                f"use e.g. {DEFAULT_MAX_FILE_BYTES} (DEFAULT_MAX_FILE_BYTES, 16 MiB)"
            )
        self._store = store
        self._transaction = transaction
        self._scope_key = scope_key
        self._user_key = user_key
        self._thread_id = thread_id
        self._new_id = new_id
        self._clock = clock
        self._max_bytes = max_bytes

    @property
    def scope_key(self) -> str:
        """The scope every saved file belongs to and every read is limited to."""
        return self._scope_key

    @property
    def user_key(self) -> str | None:
        """Who saved files are recorded as created by (``None``: no user)."""
        return self._user_key

    @property
    def thread_id(self) -> str:
        """The thread saved files are recorded as created in."""
        return self._thread_id

    @property
    def max_bytes(self) -> int:
        """The largest body :meth:`save` accepts, in bytes."""
        return self._max_bytes

    def __repr__(self) -> str:
        return (
            f"ScopedFiles(scope_key={self._scope_key!r}, user_key={self._user_key!r}, "
            f"thread_id={self._thread_id!r}, max_bytes={self._max_bytes!r})"
        )

    async def save(
        self,
        body: bytes | bytearray | memoryview,
        media_type: str,
        filename: str,
        metadata: Mapping[str, Any] | None = None,
    ) -> UploadedFile:
        """Store ``body`` as a new file of this scope and return its record.

        ``media_type`` is a ``type/subtype`` media type (``"text/csv"``, optionally with
        parameters: ``"text/plain; charset=utf-8"``); ``filename`` a bare file name
        (``"report.csv"``: no path); ``metadata`` a mapping of lossless JSON values, ``{}``
        when omitted. The record's ``file_id`` is new, ``size`` is ``len(body)`` in bytes and
        ``created_at`` the runtime clock's time.
        """
        size = _check_body(body)
        _check_media_type(media_type)
        _check_filename(filename)
        normalised = _normalise_metadata(metadata)
        if size > self._max_bytes:
            raise FileTooLarge(
                f"file {filename!r} is {size} bytes, over the limit of {self._max_bytes} "
                f"bytes; save at most {self._max_bytes} bytes (split or compress the body)",
                size=size,
                limit=self._max_bytes,
            )
        data = bytes(body)
        file = UploadedFile(
            file_id=self._new_id("file"),
            filename=filename,
            media_type=media_type,
            size=len(data),
            scope_key=self._scope_key,
            user_key=self._user_key,
            thread_id=self._thread_id,
            created_at=self._clock(),
            metadata=normalised,
        )
        async with self._transaction() as tx:
            tx.save_file(file, data)
        return file

    async def read(self, file_id: str) -> StoredFileBody:
        """The file ``file_id`` of this scope and its body.

        Raises :class:`~pai_actors.FileNotFound` if there is none: the file is missing or
        belongs to another scope, and the two are indistinguishable on purpose.
        """
        if not isinstance(file_id, str):
            raise TypeError(
                f"file_id must be a str, got {type(file_id).__name__}; pass the file_id of "
                "the UploadedFile that ctx.files.save returned"
            )
        found = await self._store.read_file(file_id, scope_key=self._scope_key)
        if found is None:
            raise FileNotFound(
                f"no file {file_id!r} in this scope; use a file_id that ctx.files.save "
                "returned in this scope",
                file_id=file_id,
            )
        return found


def _check_body(body: object) -> int:
    """The body's length in bytes, or ``TypeError``."""
    if isinstance(body, memoryview):
        return body.nbytes
    if isinstance(body, bytes | bytearray):
        return len(body)
    if isinstance(body, str):
        raise TypeError("body must be bytes, got str; encode the text first: text.encode()")
    raise TypeError(
        f"body must be bytes, bytearray or memoryview, got {type(body).__name__}; "
        "pass the file's contents as bytes"
    )


def _check_media_type(media_type: object) -> None:
    if not isinstance(media_type, str):
        raise TypeError(
            f"media_type must be a str such as 'text/csv', got {type(media_type).__name__}"
        )
    if not media_type:
        raise ValueError(
            "media_type is empty; pass the body's media type, such as 'text/csv', or "
            "'application/octet-stream' for bytes of unknown type"
        )
    if media_type != media_type.strip():
        raise ValueError(
            f"media_type {media_type!r} has leading or trailing whitespace; "
            f"use {media_type.strip()!r}"
        )
    if _MEDIA_TYPE.fullmatch(media_type) is None:
        raise ValueError(
            f"media_type {media_type!r} is not a 'type/subtype' media type; write one such "
            "as 'text/csv', 'image/png' or 'text/plain; charset=utf-8'"
        )


def _check_filename(filename: object) -> None:
    if not isinstance(filename, str):
        raise TypeError(
            f"filename must be a str such as {_EXAMPLE_NAME!r}, got {type(filename).__name__}"
        )
    if not filename:
        raise ValueError(f"filename is empty; pass a file name such as {_EXAMPLE_NAME!r}")
    if "\0" in filename:
        raise ValueError(
            f"filename {filename!r} contains a NUL character; "
            f"remove it: {filename.replace(chr(0), '')!r}"
        )
    if "/" in filename or "\\" in filename:
        last = filename.replace("\\", "/").rsplit("/", 1)[-1]
        bare = last if last not in ("", ".", "..") else _EXAMPLE_NAME
        raise ValueError(
            f"filename {filename!r} contains a path separator; a file has a bare name, "
            f"not a path: use {bare!r}"
        )
    if filename in (".", ".."):
        raise ValueError(
            f"filename {filename!r} names a directory, not a file; "
            f"pass a file name such as {_EXAMPLE_NAME!r}"
        )


def _normalise_metadata(metadata: object) -> dict[str, JsonValue]:
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise TypeError(
            f"metadata must be a mapping with str keys or None, got "
            f"{type(metadata).__name__}; pass a dict such as {{'source': 'crm'}}"
        )
    normalised = to_json_value(metadata, what="metadata")  # or OutputNotJSON
    assert isinstance(normalised, dict)  # a Mapping converts to a dict
    return normalised
