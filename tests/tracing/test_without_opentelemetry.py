"""Tracing is off unless OpenTelemetry is set up, and then the runtime runs unchanged: without
the package, with it but no tracer provider, or with one that samples nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NoOpTracerProvider

from pai_actors import ModelRequest
from pai_actors._runtime import tracing
from pai_actors.testing import ScriptedModel

from .conftest import use_provider
from .conversation import approve_a_refund

DONE = ["completed", "output-available"]


def test_without_opentelemetry_the_runtime_never_imports_it_and_runs_unchanged() -> None:
    """In a fresh interpreter where importing ``opentelemetry`` fails (as when it is not
    installed), even with a provider asked for by its environment variable."""
    script = textwrap.dedent(
        """
        import importlib.abc, os, sys

        class NotInstalled(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NotInstalled())
        os.environ["OTEL_PYTHON_TRACER_PROVIDER"] = "sdk_tracer_provider"
        import trio, trio.testing
        from tests.tracing.conversation import approve_a_refund

        print(trio.run(approve_a_refund, clock=trio.testing.MockClock(autojump_threshold=0)))
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],  # the repository: tests.tracing imports
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [repr(["completed", "output-available"]), "[]"]


async def test_a_failing_import_turns_tracing_off(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_provider(monkeypatch, provider)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)  # import raises ImportError
    assert tracing._tracer() is None
    assert await approve_a_refund() == DONE
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("provider", ["unset", "no-op"])
async def test_without_a_tracer_provider_nothing_is_recorded(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock, provider: str
) -> None:
    if provider == "no-op":
        use_provider(monkeypatch, NoOpTracerProvider())
    assert tracing._tracer() is None
    assert tracing.model_step(None, ScriptedModel([]), ModelRequest()) is tracing._NO_STEP
    assert await approve_a_refund() == DONE


async def test_a_sampler_that_drops_every_span_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.testing.MockClock
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_provider(monkeypatch, provider)
    assert tracing._tracer() is not None  # spans are made, and record nothing
    assert await approve_a_refund() == DONE
    assert exporter.get_finished_spans() == ()
