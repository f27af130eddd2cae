"""The public namespace of ``supervisors`` is curated and complete."""

from __future__ import annotations

import subprocess
import sys

import supervisors
import supervisors.testing


def test_all_names_exist_and_are_unique() -> None:
    assert len(set(supervisors.__all__)) == len(supervisors.__all__)
    for name in supervisors.__all__:
        assert hasattr(supervisors, name), name


def test_every_public_class_and_function_is_exported() -> None:
    public = {
        name
        for name, obj in vars(supervisors).items()
        if not name.startswith("_") and (isinstance(obj, type) or callable(obj))
    }
    public -= {"testing"}
    assert public <= set(supervisors.__all__)


def test_module_is_fixed_up_for_tracebacks() -> None:
    assert supervisors.ActorRef.__module__ == "supervisors"
    assert supervisors.RestartIntensityExceeded.__module__ == "supervisors"
    assert supervisors.open_supervisor.__module__ == "supervisors"


def test_errors_share_one_root() -> None:
    for name in supervisors.__all__:
        obj = getattr(supervisors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, supervisors.SupervisorError), name


def test_supervisors_never_imports_pai_actors() -> None:
    code = (
        "import sys, supervisors, supervisors.testing\n"
        "assert 'pai_actors' not in sys.modules, sorted(m for m in sys.modules if 'pai' in m)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr


def test_testing_exports() -> None:
    testing = supervisors.testing
    assert testing.__all__ == [
        "CrashOnMessage",
        "DelayMessage",
        "DropMessage",
        "ExitLog",
        "FailStart",
        "Fault",
        "FaultRecord",
        "Faults",
        "InjectedFault",
    ]
    public = {
        name
        for name, obj in vars(testing).items()
        if not name.startswith("_")
        and (isinstance(obj, type) or callable(obj))
        and getattr(obj, "__module__", "").startswith("supervisors")
        and obj is not getattr(supervisors, name, None)  # used here, exported there
    }
    assert public <= set(testing.__all__)
    for name in testing.__all__:
        obj = getattr(testing, name)
        if isinstance(obj, type):
            assert obj.__module__ == "supervisors.testing", name
    assert issubclass(testing.InjectedFault, supervisors.SupervisorError)


def test_decision_module_exports_the_whole_core() -> None:
    import supervisors.decision as decision
    from supervisors import _decide

    for name in decision.__all__:
        assert getattr(decision, name) is getattr(_decide, name)
    assert decision.decide is supervisors.decide
