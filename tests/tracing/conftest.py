"""Fixtures for the runtime's OpenTelemetry spans (``pai_actors._runtime.tracing``).

``spans`` sets the SDK's :class:`TracerProvider`, exporting to an ``InMemorySpanExporter``
through a ``SimpleSpanProcessor`` (each span exported as it ends), as the process's global
provider for one test, and puts the API's globals back after it: the API lets a process set
its provider only once, so the fixture resets that guard, as OpenTelemetry's own test
utilities (``opentelemetry.test``) do. Every other test of the suite runs with no provider,
the runtime's default of recording nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


def use_provider(monkeypatch: pytest.MonkeyPatch, provider: trace.TracerProvider) -> None:
    """Make ``provider`` the global tracer provider until the test ends."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(provider)


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_provider(monkeypatch, provider)
    yield exporter
    provider.shutdown()
