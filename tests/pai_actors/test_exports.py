"""The public namespace of ``pai_actors`` is curated and complete."""

from __future__ import annotations

import pai_actors


def test_all_names_exist_and_are_unique() -> None:
    assert len(set(pai_actors.__all__)) == len(pai_actors.__all__)
    for name in pai_actors.__all__:
        assert hasattr(pai_actors, name), name


def test_every_public_class_and_function_is_exported() -> None:
    public = {
        name
        for name, obj in vars(pai_actors).items()
        if not name.startswith("_") and (isinstance(obj, type) or callable(obj))
    }
    assert public <= set(pai_actors.__all__)


def test_module_is_fixed_up_for_tracebacks() -> None:
    assert pai_actors.ToolDefinition.__module__ == "pai_actors"
    assert pai_actors.ToolDefinitionError.__module__ == "pai_actors"
    assert pai_actors.define_tool.__module__ == "pai_actors"
    for name in pai_actors.__all__:
        module = getattr(getattr(pai_actors, name), "__module__", None)
        if isinstance(module, str):
            assert not module.startswith("pai_actors._"), name


def test_errors_share_one_root() -> None:
    errors = [
        obj
        for obj in (getattr(pai_actors, name) for name in pai_actors.__all__)
        if isinstance(obj, type) and issubclass(obj, BaseException)
    ]
    for error in errors:
        assert issubclass(error, pai_actors.PaiError), error


def test_every_error_is_exported_once() -> None:
    import pai_actors.testing
    from pai_actors._core import errors as _errors

    defined = {
        obj
        for obj in vars(_errors).values()
        if isinstance(obj, type) and issubclass(obj, pai_actors.PaiError)
    }
    exported = {getattr(pai_actors, name) for name in pai_actors.__all__} | {
        getattr(pai_actors.testing, name) for name in pai_actors.testing.__all__
    }
    assert defined <= exported


def test_error_hierarchy() -> None:
    assert issubclass(pai_actors.ToolDefinitionError, pai_actors.DefinitionError)
    for name in ("SchemaError", "ValidationFailed", "OutputNotJSON", "DefinitionError"):
        assert getattr(pai_actors, name).__bases__ == (pai_actors.PaiError,), name


def test_version_is_kept() -> None:
    assert pai_actors.__version__ == "0.1.0"
