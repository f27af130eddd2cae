"""Production ids: ``"<prefix>_<hex>"`` of a version-7 UUID, time first; test ids count."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from pai_actors._runtime.create import _id_maker, counter_ids, uuid7_hex, uuid_ids

MS = st.integers(min_value=0, max_value=(1 << 48) - 1)
RANDOM = st.binary(min_size=10, max_size=10)


def test_a_production_id_is_its_prefix_and_a_version_7_uuid() -> None:
    prefix, _, hex_digits = uuid_ids("thread").partition("_")
    assert prefix == "thread"
    parsed = uuid.UUID(hex_digits)
    assert parsed.hex == hex_digits
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert uuid_ids("thread") != uuid_ids("thread")


@given(MS, RANDOM)
def test_uuid7_holds_the_milliseconds_first_and_its_version_and_variant(
    ms: int, random: bytes
) -> None:
    value = uuid.UUID(uuid7_hex(ms, random))
    assert value.int >> 80 == ms
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    # 74 random bits survive: all but the version's four and the variant's two.
    kept = value.int & ((1 << 80) - 1) & ~(0xF << 76) & ~(0x3 << 62)
    assert kept == int.from_bytes(random, "big") & ~(0xF << 76) & ~(0x3 << 62)


@given(st.lists(MS, min_size=2, max_size=2, unique=True).map(sorted), RANDOM, RANDOM)
def test_ids_of_a_later_millisecond_sort_after(
    times: list[int], first: bytes, second: bytes
) -> None:
    earlier, later = times
    assert uuid7_hex(earlier, first) < uuid7_hex(later, second)


def test_test_ids_are_numbered_within_their_thread_and_call() -> None:
    ids = counter_ids()
    assert [ids("thread"), ids("thread")] == ["thread_1", "thread_2"]
    assert [ids("run", "thread_2"), ids("msg", "thread_2"), ids("msg", "thread_2")] == [
        "run_2_1",
        "msg_2_1",
        "msg_2_2",
    ]
    assert ids("run", "thread_1") == "run_1_1"  # thread_1's own sequence
    assert [ids("data", "thread_1", "call_2"), ids("data", "thread_1", "call_1")] == [
        "data_1_call_2_1",
        "data_1_call_1_1",
    ]
    assert ids("run", "alice") == "run_alice_1"  # a caller-supplied thread id, as it is


def test_test_ids_of_a_later_generation_carry_it() -> None:
    ids = counter_ids("g2_")
    assert [ids("thread"), ids("run", "thread_1"), ids("run", "thread_1")] == [
        "thread_g2_1",
        "run_1_g2_1",  # within a thread an earlier runtime made
        "run_1_g2_2",
    ]
    assert ids("run", "thread_g2_1") == "run_g2_1_1"  # within its own thread: new anyway


def test_an_id_maker_taking_only_the_prefix_still_works() -> None:
    made: list[str] = []

    def old_style(prefix: str) -> str:
        made.append(prefix)
        return f"{prefix}_{len(made)}"

    new_id = _id_maker(old_style)
    assert [new_id("thread"), new_id("run", "thread_1")] == ["thread_1", "run_2"]
    assert _id_maker(uuid_ids) is uuid_ids
