"""acquire_capabilities: facades entered in order, exited once in reverse, errors propagate."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from pai_actors import Capabilities, Capability, CapabilityRequest, capability
from pai_actors._tools.capabilities import Binding, acquire_capabilities

CALL = {
    "scope_key": "tenant-1",
    "thread_id": "thread-1",
    "run_id": "run-1",
    "tool_call_id": "call-1",
    "tool_name": "sandboxCommand",
}


class EnterError(Exception):
    pass


class ExitError(Exception):
    pass


class BodyError(Exception):
    pass


Enter = Literal["ok", "fail", "block"]
Exit = Literal["ok", "fail", "slow", "block"]


@dataclass(frozen=True)
class Spec:
    """One binding: how its ``__aenter__`` and its cleanup behave."""

    enter: Enter = "ok"
    exit: Exit = "ok"


@dataclass
class Log:
    events: list[tuple[str, str]] = field(default_factory=list)
    requests: list[CapabilityRequest] = field(default_factory=list)
    passed: dict[str, BaseException | None] = field(default_factory=dict)
    raised: dict[str, BaseException] = field(default_factory=dict)

    def of(self, kind: str) -> list[str]:
        return [name for k, name in self.events if k == kind]

    def binding(self, name: str, spec: Spec = Spec()) -> Binding:
        @asynccontextmanager
        async def bind(request: CapabilityRequest) -> AsyncIterator[str]:
            self.requests.append(request)
            self.events.append(("enter", name))
            try:
                await trio.lowlevel.checkpoint()
                if spec.enter == "fail":
                    raise EnterError(name)
                if spec.enter == "block":
                    await trio.sleep_forever()
            except BaseException as exc:
                self.raised[name] = exc
                raise
            self.events.append(("entered", name))
            try:
                yield f"facade-{name}"
            except BaseException as exc:
                self.passed[name] = exc
                raise
            else:
                self.passed[name] = None
            finally:
                self.events.append(("exit", name))
                if spec.exit == "fail":
                    self.raised[name] = ExitError(name)
                    raise self.raised[name]
                if spec.exit in ("slow", "block"):
                    try:
                        if spec.exit == "slow":
                            await trio.sleep(1)
                        else:
                            await trio.sleep_forever()
                    except trio.Cancelled:
                        self.events.append(("cut", name))
                        raise
                self.events.append(("exited", name))

        return bind


def tokens(*names: str) -> dict[str, Capability]:
    return {name: capability(f"test.{name}") for name in names}


def bind_all(log: Log, declared: Mapping[str, Capability], **specs: Spec) -> dict[str, Binding]:
    return {
        token.id: log.binding(name, specs.get(name, Spec())) for name, token in declared.items()
    }


async def test_facades_by_attribute_and_item() -> None:
    log = Log()
    declared = tokens("box", "db")
    async with acquire_capabilities(declared, bind_all(log, declared), **CALL) as caps:
        assert caps.box == caps["box"] == "facade-box"
        assert caps.db == caps["db"] == "facade-db"
        assert "box" in caps
        assert "nope" not in caps
        assert list(caps) == ["box", "db"]
        assert len(caps) == 2
        assert repr(caps) == "Capabilities({'box': 'facade-box', 'db': 'facade-db'})"
        with pytest.raises(AttributeError, match="read-only"):
            caps.box = "other"


async def test_enter_in_declaration_order_exit_in_reverse_once() -> None:
    log = Log()
    declared = tokens("a", "b", "c")
    async with acquire_capabilities(declared, bind_all(log, declared), **CALL):
        assert log.of("entered") == ["a", "b", "c"]
        assert log.of("exit") == []
    assert log.of("exit") == ["c", "b", "a"]
    assert log.of("exited") == ["c", "b", "a"]
    assert log.passed == {"a": None, "b": None, "c": None}


async def test_body_exception_exits_once_and_propagates() -> None:
    log = Log()
    declared = tokens("a", "b")
    error = BodyError("execute failed")
    with pytest.raises(BodyError) as caught:
        async with acquire_capabilities(declared, bind_all(log, declared), **CALL):
            raise error
    assert caught.value is error
    assert log.of("exit") == ["b", "a"]
    assert log.passed == {"a": error, "b": error}


async def test_cancelled_body_exits_once_and_cancelled_propagates() -> None:
    log = Log()
    declared = tokens("a", "b")
    seen: list[BaseException] = []
    with trio.CancelScope() as scope:
        try:
            async with acquire_capabilities(declared, bind_all(log, declared), **CALL):
                scope.cancel()
                await trio.sleep_forever()
        except BaseException as exc:
            seen.append(exc)
            raise
    assert scope.cancelled_caught
    assert len(seen) == 1
    assert isinstance(seen[0], trio.Cancelled)
    assert log.of("exit") == ["b", "a"]
    assert all(isinstance(exc, trio.Cancelled) for exc in log.passed.values())


async def test_cleanup_may_await_under_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = Log()
    declared = tokens("a", "b")
    bindings = bind_all(log, declared, a=Spec(exit="slow"), b=Spec(exit="slow"))
    with trio.move_on_after(5) as scope:
        async with acquire_capabilities(declared, bindings, **CALL):
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert log.of("exited") == ["b", "a"]
    assert log.of("cut") == []


async def test_hung_cleanup_is_cut_off_after_the_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = Log()
    declared = tokens("a", "b")
    bindings = bind_all(log, declared, b=Spec(exit="block"))
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError, match=r"within 3\.0s"):
        async with acquire_capabilities(declared, bindings, **CALL, cleanup_timeout=3.0):
            pass
    assert trio.current_time() - start == 3.0
    assert log.of("exit") == ["b", "a"]
    assert log.of("cut") == ["b"]
    assert log.of("exited") == ["a"]


async def test_hung_cleanup_keeps_the_body_error(autojump_clock: trio.testing.MockClock) -> None:
    log = Log()
    declared = tokens("a")
    error = BodyError("execute failed")
    with pytest.raises(BodyError) as caught:
        async with acquire_capabilities(
            declared, bind_all(log, declared, a=Spec(exit="block")), **CALL
        ):
            raise error
    assert caught.value is error
    assert log.of("cut") == ["a"]


async def test_failing_enter_exits_the_earlier_ones_only() -> None:
    log = Log()
    declared = tokens("a", "b", "c")
    bindings = bind_all(log, declared, b=Spec(enter="fail"))
    ran = False
    with pytest.raises(EnterError) as caught:
        async with acquire_capabilities(declared, bindings, **CALL):
            ran = True
    assert not ran
    assert caught.value is log.raised["b"]
    assert log.of("enter") == ["a", "b"]
    assert log.of("exit") == ["a"]
    assert log.passed == {"a": log.raised["b"]}


async def test_binding_raising_propagates_unchanged() -> None:
    log = Log()
    declared = tokens("a", "b")
    error = LookupError("no sandbox available")

    def broken(request: CapabilityRequest) -> Any:
        raise error

    bindings = {**bind_all(log, declared), "test.b": broken}
    with pytest.raises(LookupError) as caught:
        async with acquire_capabilities(declared, bindings, **CALL):
            pass
    assert caught.value is error
    assert log.of("exit") == ["a"]


async def test_exit_error_propagates_after_every_exit_ran() -> None:
    log = Log()
    declared = tokens("a", "b", "c")
    bindings = bind_all(log, declared, b=Spec(exit="fail"))
    error = BodyError("execute failed")
    with pytest.raises(ExitError) as caught:
        async with acquire_capabilities(declared, bindings, **CALL):
            raise error
    assert caught.value is log.raised["b"]
    assert caught.value.__context__ is error
    assert log.of("exit") == ["c", "b", "a"]
    assert log.passed["a"] is log.raised["b"]


async def test_a_facade_cannot_suppress_the_error() -> None:
    @asynccontextmanager
    async def swallowing(request: CapabilityRequest) -> AsyncIterator[str]:
        try:
            yield "facade"
        except BodyError:
            pass

    with pytest.raises(BodyError):
        async with acquire_capabilities(tokens("a"), {"test.a": swallowing}, **CALL):
            raise BodyError("execute failed")


@pytest.mark.parametrize(
    ("returned", "shown"),
    [("not a context manager", "'not a context manager'"), (None, "None")],
)
async def test_binding_returning_a_non_context_manager(returned: object, shown: str) -> None:
    log = Log()
    declared = tokens("a", "box")
    bindings: dict[str, Any] = {**bind_all(log, declared), "test.box": lambda request: returned}
    with pytest.raises(TypeError) as caught:
        async with acquire_capabilities(declared, bindings, **CALL):
            pass
    message = str(caught.value)
    assert "'test.box'" in message
    assert "'box'" in message
    assert f"returned {shown}" in message
    assert "must return an async context manager" in message
    assert "@asynccontextmanager" in message
    assert log.of("exit") == ["a"]


async def test_async_def_binding_is_explained_and_its_coroutine_closed() -> None:
    async def forgot_the_decorator(request: CapabilityRequest) -> str:
        return "facade"

    with pytest.raises(TypeError, match="'async def' function"):
        async with acquire_capabilities(tokens("a"), {"test.a": forgot_the_decorator}, **CALL):
            pass


async def test_missing_binding_names_the_capability() -> None:
    log = Log()
    declared = tokens("a", "b")
    with pytest.raises(RuntimeError, match=r"no binding for capability 'test\.b'"):
        async with acquire_capabilities(declared, {"test.a": log.binding("a")}, **CALL):
            pass
    assert log.events == []


async def test_request_fields() -> None:
    log = Log()
    declared = {"box": capability("acme.sandbox")}
    async with acquire_capabilities(declared, {"acme.sandbox": log.binding("box")}, **CALL):
        pass
    assert log.requests == [
        CapabilityRequest(
            capability_id="acme.sandbox",
            scope_key="tenant-1",
            thread_id="thread-1",
            run_id="run-1",
            tool_call_id="call-1",
            tool_name="sandboxCommand",
        )
    ]


async def test_aliases_acquire_twice() -> None:
    sandbox = capability("acme.sandbox")
    counter = iter(range(10))
    exits: list[int] = []

    @asynccontextmanager
    async def bind(request: CapabilityRequest) -> AsyncIterator[int]:
        n = next(counter)
        try:
            yield n
        finally:
            exits.append(n)

    async with acquire_capabilities(
        {"box": sandbox, "spare": sandbox}, {"acme.sandbox": bind}, **CALL
    ) as caps:
        assert (caps.box, caps.spare) == (0, 1)
    assert exits == [1, 0]


def test_unknown_names_list_the_declared_ones() -> None:
    caps = Capabilities({"box": 1, "db": 2})
    with pytest.raises(AttributeError, match=r"no capability 'nope'.*declares 'box', 'db'"):
        _ = caps.nope
    with pytest.raises(KeyError, match=r"no capability 'nope'.*declares 'box', 'db'"):
        _ = caps["nope"]
    with pytest.raises(AttributeError, match="declares no capabilities"):
        _ = Capabilities().box
    assert "box" in dir(caps)
    assert not hasattr(caps, "__deepcopy__")


# -- property: random bindings, a random cancel point -----------------------------------------


@dataclass(frozen=True)
class Scenario:
    specs: tuple[Spec, ...]
    body: Literal["ok", "fail", "block"]
    cancel_at: float


CLEANUP_BOUND = 5.0


async def run_scenario(scenario: Scenario) -> tuple[Log, BaseException | None, bool]:
    """Run ``scenario``; return its log, the exception that ended the block, and the escape.

    The block ends with the first error of entering, or the body's own outcome (``None``,
    :class:`BodyError` or :exc:`trio.Cancelled`). The escape is what left
    ``acquire_capabilities`` and was not caught by the cancel scope.
    """
    log = Log()
    names = [f"c{i}" for i in range(len(scenario.specs))]
    declared = tokens(*names)
    bindings = bind_all(log, declared, **dict(zip(names, scenario.specs, strict=True)))
    ended: BaseException | None = None
    escaped: BaseException | None = None
    with trio.move_on_after(scenario.cancel_at):
        try:
            async with acquire_capabilities(
                declared, bindings, **CALL, cleanup_timeout=CLEANUP_BOUND
            ):
                log.events.append(("body", ""))
                try:
                    await trio.lowlevel.checkpoint()
                    if scenario.body == "fail":
                        raise BodyError("body")
                    if scenario.body == "block":
                        await trio.sleep_forever()
                except BaseException as exc:
                    ended = exc
                    raise
        except BaseException as exc:
            if not log.of("body"):
                ended = log.raised[log.of("enter")[-1]]
            escaped = exc
            if not isinstance(exc, Exception):
                raise
    return log, ended, escaped


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_entered_facade_is_exited_exactly_once(data: st.DataObject) -> None:
    specs = data.draw(
        st.lists(
            st.builds(
                Spec,
                enter=st.sampled_from(["ok", "ok", "fail", "block"]),
                exit=st.sampled_from(["ok", "ok", "fail", "slow", "block"]),
            ),
            max_size=5,
        ),
        label="specs",
    )
    scenario = Scenario(
        specs=tuple(specs),
        body=data.draw(st.sampled_from(["ok", "fail", "block"]), label="body"),
        cancel_at=data.draw(
            st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 7.0, 1000.0]), label="cancel_at"
        ),
    )
    clock = trio.testing.MockClock(autojump_threshold=0)
    log, ended, escaped = trio.run(run_scenario, scenario, clock=clock)

    entered = log.of("entered")
    exits = log.of("exit")
    # Every entered facade is exited once, in reverse order; no other one is exited.
    assert exits == list(reversed(entered))
    assert bool(log.of("body")) == (len(entered) == len(scenario.specs))
    # Each cleanup either completed, raised its ExitError, or was cut off by the bound.
    failed = [n for n in exits if isinstance(log.raised.get(n), ExitError)]
    finished = log.of("exited") + log.of("cut") + failed
    assert sorted(finished) == sorted(exits)

    # Replay the propagation rule: each exit sees what is pending and an exit error replaces
    # it; a cut-off cleanup changes nothing; with nothing pending, a cut-off gives
    # TooSlowError; a pending Cancelled is caught by the test's cancel scope.
    pending = ended
    for name in exits:
        assert log.passed[name] is pending
        if name in failed:
            pending = log.raised[name]
    if pending is None and log.of("cut"):
        assert isinstance(escaped, trio.TooSlowError)
    else:
        assert escaped is pending
