"""The .pyi stub of the compiled module lists exactly the names the module exports."""

import ast
import inspect
import pathlib

import ppol_rs
from ppol_rs import _core

STUB = pathlib.Path(ppol_rs.__file__).with_name("_core.pyi")


def stub_names():
    tree = ast.parse(STUB.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names, members


def test_stub_lists_every_public_name_and_nothing_else():
    names, members = stub_names()
    module = {n for n in dir(_core) if not n.startswith("_")} | {"__version__"}
    assert names - {"_Traces"} == module
    for cls, stub_members in members.items():
        obj = getattr(_core, cls)
        if issubclass(obj, BaseException):
            continue
        real = {n for n, _ in inspect.getmembers(obj) if not n.startswith("_")}
        assert stub_members == real, cls


def test_every_public_function_has_a_docstring_with_an_example():
    for name in ppol_rs.__all__:
        obj = getattr(ppol_rs, name)
        if inspect.isfunction(obj):
            assert obj.__doc__ and ">>>" in obj.__doc__, name
