"""envs/core/errors.py is the one vocabulary of failures of ``repogym.envs``: every error is a RepogymError,
and no other module under envs/ defines an exception class."""

import ast
import builtins
import inspect
from pathlib import Path

import pytest

from repogym.envs.core import errors

ENVS = Path(__file__).resolve().parents[1] / "envs"
# Run inside a sandbox or as a script, where repogym is not importable: they keep their own exceptions.
OUTSIDE_THE_VOCABULARY = ("sandbox/inside/", "sandbox/local_launch.py")
ERROR_CLASSES = [obj for _, obj in inspect.getmembers(errors, inspect.isclass)
                 if issubclass(obj, BaseException) and obj.__module__ == errors.__name__]


def _base_name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def exception_classes_outside_errors(root: Path = ENVS) -> list[str]:
    """``path:line Name`` of each class under ``root`` (but errors.py) that derives from an exception."""
    exceptions = {name for name, obj in vars(builtins).items() if isinstance(obj, type) and issubclass(obj, BaseException)}
    exceptions |= {cls.__name__ for cls in ERROR_CLASSES}
    classes = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "core/errors.py" or rel.startswith(OUTSIDE_THE_VOCABULARY):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                classes.append((f"envs/{rel}:{node.lineno} {node.name}", node.name, [_base_name(b) for b in node.bases]))
    found: set[str] = set()
    grew = True
    while grew:  # a class deriving from one found here is an exception too
        grew = False
        for where, name, bases in classes:
            if where not in found and any(b in exceptions for b in bases):
                found.add(where)
                exceptions.add(name)
                grew = True
    return sorted(found)


def test_every_exception_class_of_envs_is_defined_in_errors_py():
    assert exception_classes_outside_errors() == []


def test_the_walk_finds_an_exception_class_defined_elsewhere(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "errors.py").write_text("class RepogymError(Exception):\n    pass\n")
    (tmp_path / "mod.py").write_text("import x\nclass Direct(ValueError):\n    pass\n"
                                     "class Indirect(Direct):\n    pass\nclass Typed(x.RepogymError):\n    pass\n"
                                     "class Plain:\n    pass\n")
    (tmp_path / "sandbox" / "inside").mkdir(parents=True)
    (tmp_path / "sandbox" / "inside" / "runner.py").write_text("class Own(Exception):\n    pass\n")
    assert [w.split()[1] for w in exception_classes_outside_errors(tmp_path)] == ["Direct", "Indirect", "Typed"]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_each_error_is_a_repogym_error_saying_when_it_is_raised(cls):
    assert issubclass(cls, errors.RepogymError)
    assert cls.__doc__ and cls.__doc__.strip().splitlines()[0].strip(), f"{cls.__name__} has no docstring"


def test_the_vocabulary_is_not_empty():
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {"RepogymError", "ConfigError", "InfraError", "SandboxKilledByAgent", "SandboxRequestError",
            "TestRunTimeout", "SourceNotUsable", "MutantTimeout", "MutationNotLongHorizon"} <= names
