"""A default exists once (issue #38): the CLI (clap, read through ``_core._cli_defaults()``),
the binding's signatures (``inspect.signature`` of ``_core``'s functions and methods), their
stubs (``_core.pyi``) and the package's wrappers (``ppol_rs.__init__``) agree. Each side is
read by introspection: nothing here parses Rust. The Rust side (tests/defaults.rs) checks the
CLI's defaults against the request structs and the settings, so the chain is closed.
A last test feeds the comparison fabricated mismatches to show it catches each kind."""

import ast
import inspect
import pathlib

import ppol_rs
from ppol_rs import _core

STUB = pathlib.Path(ppol_rs.__file__).with_name("_core.pyi")
REQUIRED = object()

# (CLI subcommand path, Python callable of `_core` of the same verb)
VERBS = [
    ("episodes", "episodes"),
    ("generate", "generate"),
    ("eval", "evaluate"),
    ("discriminator train", "Discriminator.train"),
    ("score", "score"),
    ("export sft", "export_sft"),
    ("study make", "study_make"),
    ("study analyze", "study_analyze"),
    ("audit", "audit"),
    ("report", "report"),
]

# Python parameters whose None stands for "the configuration's, else the CLI's default":
# llm=None takes the [llm] of config=, as --llm offline (the CLI's default) does.
NONE_MEANS_CONFIG = {"llm"}


def norm(value):
    """A default in one notation: booleans and numbers by value, strings as they are."""
    if value is REQUIRED or value is None:
        return value
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value)
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def params(sig):
    out = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("self", "cls", "py"):
            continue
        out[p.name] = REQUIRED if p.default is p.empty else norm(p.default)
    return out


def core_signatures():
    """Every public function of `_core` and every method of its classes that has a signature."""
    out = {}
    for name in dir(_core):
        if name.startswith("_"):
            continue
        obj = getattr(_core, name)
        if inspect.isclass(obj):
            for m in dir(obj):
                if m.startswith("_"):
                    continue
                member = getattr(obj, m)
                if callable(member) and getattr(member, "__text_signature__", None):
                    out[f"{name}.{m}"] = params(inspect.signature(member))
        elif callable(obj) and getattr(obj, "__text_signature__", None):
            out[name] = params(inspect.signature(obj))
    return out


def stub_signatures():
    """The stub's `def`s (classes' methods as `Class.method`), defaults by literal value."""
    tree = ast.parse(STUB.read_text())
    out = {}

    def of(fn):
        args = fn.args
        names = [a.arg for a in args.posonlyargs + args.args]
        defaults = [REQUIRED] * (len(names) - len(args.defaults)) + [ast.literal_eval(d) for d in args.defaults]
        got = dict(zip(names, (norm(d) for d in defaults)))
        for a, d in zip(args.kwonlyargs, args.kw_defaults):
            got[a.arg] = REQUIRED if d is None else norm(ast.literal_eval(d))
        return {k: v for k, v in got.items() if k not in ("self", "cls")}

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = of(node)
        elif isinstance(node, ast.ClassDef):
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("_"):
                    out[f"{node.name}.{f.name}"] = of(f)
    return out


def package_signatures():
    out = {}
    for name in getattr(ppol_rs, "__all__", dir(ppol_rs)):
        obj = getattr(ppol_rs, name, None)
        if inspect.isfunction(obj) and obj.__module__ == "ppol_rs":
            out[name] = params(inspect.signature(obj))
    return out


def disagreements(cli, core, stubs, package):
    out = []
    for name, ps in core.items():
        stub = stubs.get(name)
        if stub is None:
            out.append(f"_core.{name}: no stub in _core.pyi")
        elif stub != ps:
            out.append(f"_core.{name}: the binding says {ps}, _core.pyi says {stub}")
        wrapper = package.get(name)
        for p, d in (wrapper or {}).items():
            if p in ps and ps[p] != d:
                out.append(f"{name}({p}): the binding's default is {ps[p]!r}, __init__.py's {d!r}")
    for verb, py_name in VERBS:
        flags, ps = cli.get(verb), core.get(py_name)
        if flags is None or ps is None:
            out.append(f"{verb} / {py_name}: not found on both sides")
            continue
        for p, py_default in ps.items():
            if p not in flags or py_default is REQUIRED:
                continue
            cli_default = norm(flags[p])
            if p in NONE_MEANS_CONFIG:
                expected = None
            elif cli_default is not None:
                expected = cli_default
            elif py_default is False:
                expected = False  # a switch: off unless given
            else:
                expected = None  # the CLI leaves it to the configuration: so does Python
            if py_default != expected:
                out.append(f"{verb} --{p}: the CLI's default is {flags[p]!r}, Python's {py_default!r}")
    return out


def test_the_cli_the_binding_the_stubs_and_the_package_agree_on_every_default():
    core = core_signatures()
    assert "episodes" in core and "Discriminator.train" in core, sorted(core)
    found = disagreements(_core._cli_defaults(), core, stub_signatures(), package_signatures())
    assert not found, "defaults disagree:\n" + "\n".join(found)


def test_the_comparison_catches_each_kind_of_disagreement():
    core = {"episodes": {"domain": None, "tasks": "all", "trials": 1.0, "llm": None, "concurrency": 256.0}}
    stubs = {"episodes": dict(core["episodes"])}
    package = {"episodes": dict(core["episodes"])}
    cli = {v: {} for v, _ in VERBS}
    cli["episodes"] = {"domain": None, "tasks": "all", "trials": "1", "llm": "offline", "concurrency": "256"}
    others = {py: {} for _, py in VERBS if py != "episodes"}
    ok = lambda c=cli, k=core, s=stubs, p=package: disagreements(c, {**k, **others}, {**s, **others}, p)
    assert ok() == []
    # the CLI against the binding
    d = ok(c={**cli, "episodes": {**cli["episodes"], "concurrency": "255"}})
    assert len(d) == 1 and "episodes --concurrency" in d[0], d
    # the stubs against the binding, and a stub missing
    d = ok(s={"episodes": {**stubs["episodes"], "concurrency": 128.0}})
    assert len(d) == 1 and "_core.pyi" in d[0], d
    d = ok(s={})
    assert len(d) == 1 and "no stub" in d[0], d
    # the package's wrapper against the binding
    d = ok(p={"episodes": {**package["episodes"], "trials": 3.0}})
    assert len(d) == 1 and "__init__.py" in d[0], d
    # a Python default where the CLI leaves the value to the configuration
    demo = {"episodes": {**core["episodes"], "domain": "demo"}}
    d = ok(k=demo, s=demo, p={})
    assert any("episodes --domain" in x for x in d), d
