"""ScopedFiles (``ctx.files``): saving and reading scoped files against a MemoryStore."""

from __future__ import annotations

import array
import enum
import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
import trio
import trio.testing

from pai_actors import (
    DEFAULT_MAX_FILE_BYTES,
    FileNotFound,
    FileTooLarge,
    MemoryStore,
    OutputNotJSON,
    PaiError,
    ScopedFiles,
    StoredFileBody,
    UploadedFile,
)
from pai_actors._core.clock import EPOCH
from pai_actors._runtime.create import counter_ids
from pai_actors._store.base import SaveFile, Write
from pai_actors.testing import trio_clock


class RecordingStore(MemoryStore):
    """A MemoryStore that remembers every batch it was asked to commit."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[Sequence[Write]] = []

    async def commit(self, writes: Sequence[Write]) -> None:
        self.commits.append(tuple(writes))
        await super().commit(writes)


class StalledStore(MemoryStore):
    """A MemoryStore whose commit blocks until cancelled (never writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.committing = trio.Event()

    async def commit(self, writes: Sequence[Write]) -> None:
        self.committing.set()
        await trio.sleep_forever()


def scoped(
    store: MemoryStore,
    *,
    scope_key: str = "scope-a",
    user_key: str | None = "user-1",
    thread_id: str = "thread-1",
    max_bytes: int = DEFAULT_MAX_FILE_BYTES,
    new_id: Any = None,
) -> ScopedFiles:
    return ScopedFiles(
        store=store,
        transaction=store.transaction,
        scope_key=scope_key,
        user_key=user_key,
        thread_id=thread_id,
        new_id=counter_ids() if new_id is None else new_id,
        clock=trio_clock(),
        max_bytes=max_bytes,
    )


# Saving and reading.


async def test_binary_body_round_trips(autojump_clock: trio.testing.MockClock) -> None:
    store = RecordingStore()
    files = scoped(store)
    body = bytes(range(256)) * 3
    autojump_clock.jump(5)

    saved = await files.save(body, "application/octet-stream", "blob.bin")

    assert saved == UploadedFile(
        file_id="file_1",
        filename="blob.bin",
        media_type="application/octet-stream",
        size=768,
        scope_key="scope-a",
        user_key="user-1",
        thread_id="thread-1",
        created_at=EPOCH + timedelta(seconds=5),  # trio time 0 is EPOCH
        metadata={},
    )
    assert saved.created_at.tzinfo is not None
    assert [list(batch) for batch in store.commits] == [[SaveFile(saved, body)]]
    assert await files.read("file_1") == StoredFileBody(saved, body)


async def test_created_at_reads_the_clock(autojump_clock: trio.testing.MockClock) -> None:
    files = scoped(MemoryStore())
    first = await files.save(b"a", "text/plain", "a.txt")
    autojump_clock.jump(90)
    second = await files.save(b"b", "text/plain", "b.txt")
    assert second.created_at - first.created_at == timedelta(seconds=90)


async def test_each_save_gets_a_new_id_from_new_id() -> None:
    files = scoped(MemoryStore(), new_id=counter_ids("g1_"))
    ids = [(await files.save(b"x", "text/plain", "x.txt")).file_id for _ in range(3)]
    assert ids == ["file_g1_1", "file_g1_2", "file_g1_3"]


@pytest.mark.parametrize(
    "body",
    [bytearray(b"\x00\xffdata"), memoryview(b"\x00\xffdata"), memoryview(b"xx\x00\xffdata")[2:]],
    ids=["bytearray", "memoryview", "memoryview-slice"],
)
async def test_bytearray_and_memoryview_are_stored_as_bytes(
    body: bytearray | memoryview,
) -> None:
    files = scoped(MemoryStore())
    saved = await files.save(body, "application/octet-stream", "b.bin")
    stored = await files.read(saved.file_id)
    assert type(stored.body) is bytes
    assert stored.body == b"\x00\xffdata"
    assert saved.size == 6


async def test_a_memoryview_is_measured_in_bytes_not_items() -> None:
    numbers = array.array("i", [1, 2, 3])
    files = scoped(MemoryStore())
    saved = await files.save(memoryview(numbers), "application/octet-stream", "ints.bin")
    assert saved.size == numbers.itemsize * 3
    assert (await files.read(saved.file_id)).body == numbers.tobytes()


async def test_a_later_change_to_a_bytearray_does_not_reach_the_store() -> None:
    body = bytearray(b"before")
    files = scoped(MemoryStore())
    saved = await files.save(body, "text/plain", "a.txt")
    body[:] = b"after!"
    assert (await files.read(saved.file_id)).body == b"before"


async def test_an_empty_body_is_a_file() -> None:
    files = scoped(MemoryStore())
    saved = await files.save(b"", "text/plain", "empty.txt")
    assert saved.size == 0
    assert (await files.read(saved.file_id)).body == b""


async def test_user_key_may_be_none() -> None:
    files = scoped(MemoryStore(), user_key=None)
    saved = await files.save(b"x", "text/plain", "x.txt")
    assert saved.user_key is None


async def test_concurrent_saves_are_all_stored() -> None:
    files = scoped(MemoryStore())
    saved: list[UploadedFile] = []

    async def save(n: int) -> None:
        saved.append(await files.save(bytes([n]), "application/octet-stream", f"{n}.bin"))

    async with trio.open_nursery() as nursery:
        for n in range(10):
            nursery.start_soon(save, n)
    assert len({file.file_id for file in saved}) == 10
    for file in saved:
        assert (await files.read(file.file_id)).body == bytes([int(file.filename[:-4])])


# Metadata.


async def test_metadata_defaults_to_an_empty_dict() -> None:
    files = scoped(MemoryStore())
    saved = await files.save(b"x", "text/plain", "x.txt")
    assert saved.metadata == {}
    assert (await files.read(saved.file_id)).file.metadata == {}


class Kind(enum.StrEnum):
    REPORT = "report"


async def test_metadata_is_normalised_to_json() -> None:
    files = scoped(MemoryStore())
    metadata: dict[str, Any] = {
        "kind": Kind.REPORT,
        "columns": ("region", "total"),
        "rows": 2,
        "nested": {"ok": True, "none": None},
    }
    saved = await files.save(b"x", "text/csv", "r.csv", metadata)
    expected = {
        "kind": "report",
        "columns": ["region", "total"],
        "rows": 2,
        "nested": {"ok": True, "none": None},
    }
    assert saved.metadata == expected
    assert type(saved.metadata["kind"]) is str
    assert (await files.read(saved.file_id)).file.metadata == expected
    metadata["nested"]["ok"] = False  # the caller's value is not shared with the record
    assert (await files.read(saved.file_id)).file.metadata == expected


@pytest.mark.parametrize(
    ("metadata", "path"),
    [
        ({"score": math.nan}, "metadata['score']"),
        ({"when": object()}, "metadata['when']"),
        ({"ids": [1, {2, 3}]}, "metadata['ids'][1]"),
        ({"big": 2**60}, "metadata['big']"),
        ({1: "one"}, "metadata"),
    ],
    ids=["nan", "object", "set", "unsafe-int", "int-key"],
)
async def test_metadata_that_is_not_json_is_refused(metadata: Any, path: str) -> None:
    store = RecordingStore()
    files = scoped(store)
    with pytest.raises(OutputNotJSON) as caught:
        await files.save(b"x", "text/plain", "x.txt", metadata)
    assert caught.value.path.startswith(path)
    assert store.commits == []


@pytest.mark.parametrize("metadata", [[("a", 1)], "a=1", 3])
async def test_metadata_that_is_not_a_mapping_is_a_type_error(metadata: Any) -> None:
    store = RecordingStore()
    with pytest.raises(TypeError, match=r"metadata must be a mapping with str keys or None"):
        await scoped(store).save(b"x", "text/plain", "x.txt", metadata)
    assert store.commits == []


# The size limit.


async def test_a_body_exactly_at_the_limit_is_accepted() -> None:
    files = scoped(MemoryStore(), max_bytes=10)
    saved = await files.save(b"0123456789", "text/plain", "ten.txt")
    assert saved.size == 10
    assert (await files.read(saved.file_id)).body == b"0123456789"


@pytest.mark.parametrize(
    "body", [b"0123456789a", bytearray(11), memoryview(array.array("h", [0] * 6))]
)
async def test_a_body_over_the_limit_is_refused_and_nothing_stored(
    body: bytes | bytearray | memoryview,
) -> None:
    store = RecordingStore()
    files = scoped(store, max_bytes=10)
    with pytest.raises(FileTooLarge) as caught:
        await files.save(body, "text/plain", "big.txt")
    size = 12 if isinstance(body, memoryview) else 11
    assert (caught.value.size, caught.value.limit) == (size, 10)
    assert isinstance(caught.value, PaiError)
    assert str(caught.value) == (
        f"file 'big.txt' is {size} bytes, over the limit of 10 bytes; "
        "save at most 10 bytes (split or compress the body)"
    )
    assert store.commits == []
    with pytest.raises(FileNotFound):
        await files.read("file_1")


async def test_the_default_limit_is_16_mib() -> None:
    assert DEFAULT_MAX_FILE_BYTES == 16 * 1024 * 1024
    assert scoped(MemoryStore()).max_bytes == DEFAULT_MAX_FILE_BYTES


# Scopes.


async def test_another_scopes_file_reads_exactly_like_a_missing_one() -> None:
    store = MemoryStore()
    ids = counter_ids()
    mine = scoped(store, scope_key="scope-a", new_id=ids)
    theirs = scoped(store, scope_key="scope-b", new_id=ids)
    saved = await theirs.save(b"secret", "text/plain", "secret.txt")
    assert saved.file_id == "file_1"

    with pytest.raises(FileNotFound) as other:
        await mine.read("file_1")
    with pytest.raises(FileNotFound) as missing:
        await mine.read("file_2")

    assert other.value.file_id == "file_1"
    assert missing.value.file_id == "file_2"
    assert str(other.value) == (
        "no file 'file_1' in this scope; use a file_id that ctx.files.save returned in this scope"
    )
    assert str(other.value).replace("file_1", "file_2") == str(missing.value)
    assert isinstance(other.value, PaiError)
    # the owner still reads it
    assert (await theirs.read("file_1")).body == b"secret"


async def test_any_thread_of_the_scope_reads_a_file() -> None:
    store = MemoryStore()
    ids = counter_ids()
    saved = await scoped(store, thread_id="t1", user_key="u1", new_id=ids).save(
        b"x", "text/plain", "x.txt"
    )
    stored = await scoped(store, thread_id="t2", user_key="u2", new_id=ids).read(saved.file_id)
    assert stored.file == saved
    assert (stored.file.thread_id, stored.file.user_key) == ("t1", "u1")


async def test_the_injected_identity_is_what_a_file_records() -> None:
    files = scoped(MemoryStore(), scope_key="tenant-9", user_key="alice", thread_id="t-7")
    saved = await files.save(b"x", "text/plain", "x.txt", {"scope_key": "tenant-1"})
    assert (saved.scope_key, saved.user_key, saved.thread_id) == ("tenant-9", "alice", "t-7")
    assert saved.metadata == {"scope_key": "tenant-1"}  # metadata is only metadata
    assert (files.scope_key, files.user_key, files.thread_id) == ("tenant-9", "alice", "t-7")


def test_repr_names_the_binding() -> None:
    files = scoped(MemoryStore(), max_bytes=100)
    assert repr(files) == (
        "ScopedFiles(scope_key='scope-a', user_key='user-1', thread_id='thread-1', max_bytes=100)"
    )


# Cancellation.


async def test_a_save_cancelled_before_it_commits_stores_nothing() -> None:
    store = MemoryStore()
    files = scoped(store)
    with trio.CancelScope() as cancel_scope:
        cancel_scope.cancel()
        await files.save(b"data", "text/plain", "x.txt")
    assert cancel_scope.cancelled_caught
    with pytest.raises(FileNotFound):
        await files.read("file_1")


async def test_a_save_cancelled_while_committing_stores_nothing() -> None:
    store = StalledStore()
    files = scoped(store)
    cancel_scope = trio.CancelScope()
    saved: list[UploadedFile] = []

    async def save() -> None:
        with cancel_scope:
            saved.append(await files.save(b"data", "text/plain", "x.txt"))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(save)
            await store.committing.wait()
            cancel_scope.cancel()
    assert cancel_scope.cancelled_caught
    assert saved == []
    with pytest.raises(FileNotFound):
        await files.read("file_1")


# Invalid arguments.


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ("text", TypeError, "body must be bytes, got str; encode the text first: text.encode()"),
        (
            [1, 2],
            TypeError,
            "body must be bytes, bytearray or memoryview, got list; "
            "pass the file's contents as bytes",
        ),
        (
            None,
            TypeError,
            "body must be bytes, bytearray or memoryview, got NoneType; "
            "pass the file's contents as bytes",
        ),
    ],
)
async def test_an_invalid_body_is_refused(body: Any, error: type[Exception], message: str) -> None:
    store = RecordingStore()
    with pytest.raises(error) as caught:
        await scoped(store).save(body, "text/plain", "x.txt")
    assert str(caught.value) == message
    assert store.commits == []


@pytest.mark.parametrize(
    "media_type",
    [
        "text/csv",
        "image/png",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "application/ld+json",
        "text/plain; charset=utf-8",
        'multipart/form-data;boundary="a b"',
        "TEXT/CSV",
    ],
)
async def test_valid_media_types_are_kept_as_given(media_type: str) -> None:
    saved = await scoped(MemoryStore()).save(b"x", media_type, "x.txt")
    assert saved.media_type == media_type


@pytest.mark.parametrize(
    ("media_type", "error", "message"),
    [
        (None, TypeError, "media_type must be a str such as 'text/csv', got NoneType"),
        (
            b"text/csv",
            TypeError,
            "media_type must be a str such as 'text/csv', got bytes",
        ),
        (
            "",
            ValueError,
            "media_type is empty; pass the body's media type, such as 'text/csv', or "
            "'application/octet-stream' for bytes of unknown type",
        ),
        (
            " text/csv ",
            ValueError,
            "media_type ' text/csv ' has leading or trailing whitespace; use 'text/csv'",
        ),
        *(
            (
                bad,
                ValueError,
                f"media_type {bad!r} is not a 'type/subtype' media type; write one such "
                "as 'text/csv', 'image/png' or 'text/plain; charset=utf-8'",
            )
            for bad in ("csv", "text/", "/csv", "text/csv/x", "text /csv", "text/plain; x")
        ),
    ],
)
async def test_an_invalid_media_type_is_refused(
    media_type: Any, error: type[Exception], message: str
) -> None:
    store = RecordingStore()
    with pytest.raises(error) as caught:
        await scoped(store).save(b"x", media_type, "x.txt")
    assert str(caught.value) == message
    assert store.commits == []


@pytest.mark.parametrize(
    ("filename", "error", "message"),
    [
        (None, TypeError, "filename must be a str such as 'report.csv', got NoneType"),
        ("", ValueError, "filename is empty; pass a file name such as 'report.csv'"),
        (
            "reports/q1.csv",
            ValueError,
            "filename 'reports/q1.csv' contains a path separator; a file has a bare name, "
            "not a path: use 'q1.csv'",
        ),
        (
            "..\\..\\etc\\passwd",
            ValueError,
            "filename '..\\\\..\\\\etc\\\\passwd' contains a path separator; a file has a "
            "bare name, not a path: use 'passwd'",
        ),
        (
            "dir/",
            ValueError,
            "filename 'dir/' contains a path separator; a file has a bare name, "
            "not a path: use 'report.csv'",
        ),
        (
            "a\0.csv",
            ValueError,
            "filename 'a\\x00.csv' contains a NUL character; remove it: 'a.csv'",
        ),
        (
            ".",
            ValueError,
            "filename '.' names a directory, not a file; pass a file name such as 'report.csv'",
        ),
        (
            "..",
            ValueError,
            "filename '..' names a directory, not a file; pass a file name such as 'report.csv'",
        ),
    ],
)
async def test_an_invalid_filename_is_refused(
    filename: Any, error: type[Exception], message: str
) -> None:
    store = RecordingStore()
    with pytest.raises(error) as caught:
        await scoped(store).save(b"x", "text/plain", filename)
    assert str(caught.value) == message
    assert store.commits == []


@pytest.mark.parametrize("filename", ["report.csv", "...", ".env", "résumé 2025.pdf"])
async def test_valid_filenames_are_kept_as_given(filename: str) -> None:
    saved = await scoped(MemoryStore()).save(b"x", "text/plain", filename)
    assert saved.filename == filename


async def test_argument_errors_come_before_the_size_limit() -> None:
    files = scoped(MemoryStore(), max_bytes=1)
    with pytest.raises(ValueError, match="path separator"):
        await files.save(b"too big", "text/plain", "a/b.txt")


async def test_read_needs_a_str_file_id() -> None:
    with pytest.raises(TypeError) as caught:
        await scoped(MemoryStore()).read(1)  # type: ignore[arg-type]  # the misuse tested
    assert str(caught.value) == (
        "file_id must be a str, got int; pass the file_id of the UploadedFile that "
        "ctx.files.save returned"
    )


@pytest.mark.parametrize("max_bytes", [0, -1, True, 1.5, "10", None])
def test_max_bytes_must_be_a_positive_int(max_bytes: Any) -> None:
    with pytest.raises(ValueError, match=r"^max_bytes must be a positive int") as caught:
        scoped(MemoryStore(), max_bytes=max_bytes)
    assert str(caught.value) == (
        f"max_bytes must be a positive int (a number of bytes), got {max_bytes!r}; "
        "use e.g. 16777216 (DEFAULT_MAX_FILE_BYTES, 16 MiB)"
    )


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("scope_key", None, "scope_key must be a str, got NoneType"),
        ("user_key", 7, "user_key must be a str or None, got int"),
        ("thread_id", b"t", "thread_id must be a str, got bytes"),
    ],
)
def test_the_injected_identity_must_be_strings(field: str, value: Any, message: str) -> None:
    store = MemoryStore()
    arguments: dict[str, Any] = {
        "store": store,
        "transaction": store.transaction,
        "scope_key": "scope-a",
        "user_key": "user-1",
        "thread_id": "thread-1",
        "new_id": counter_ids(),
        "clock": trio_clock(),
        field: value,
    }
    with pytest.raises(TypeError) as caught:
        ScopedFiles(**arguments)
    assert str(caught.value) == message
