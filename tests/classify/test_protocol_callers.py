"""Every rule of `breakthrough.classify` that takes a `protocol` defaults it to the study's
(`protocol.DEFAULT`) for tests and notebooks; code that labels a run must pass the run's own
protocol (`RunStore.protocol()`), or a run made with B = 64 would be labelled with B = 1,024's
instant and budget-limited budgets. This reads the source of the packages above classify and
checks that each call of such a function passes `protocol` (by keyword, position or **kw)."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import breakthrough
import breakthrough.classify

CALLERS = ("classify", "pipeline", "report", "commands")
ROOT = Path(breakthrough.__file__).parent


def _protocol_functions() -> dict[tuple[str, str], int]:
    """(classify module, function) → position of its `protocol` parameter, for every function
    whose `protocol` has a default."""
    out = {}
    for info in pkgutil.iter_modules(breakthrough.classify.__path__):
        mod = importlib.import_module(f"breakthrough.classify.{info.name}")
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if fn.__module__ != mod.__name__:
                continue
            params = list(inspect.signature(fn).parameters.values())
            for i, p in enumerate(params):
                if p.name == "protocol" and p.default is not inspect.Parameter.empty:
                    positional = p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                    out[(mod.__name__, name)] = i if positional else -1
    return out


def _calls(tree: ast.AST) -> list[tuple[str, str, ast.Call]]:
    """(classify module, function, call) of every call of a classify function in a module,
    through `from breakthrough.classify.X import f [as g]` or `from breakthrough.classify
    import X [as M]` / `import breakthrough.classify.X as M`."""
    names: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module.startswith("breakthrough.classify."):
                    names[a.asname or a.name] = (node.module, a.name)
                elif node.module == "breakthrough.classify":
                    modules[a.asname or a.name] = f"breakthrough.classify.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("breakthrough.classify.") and a.asname:
                    modules[a.asname] = a.name
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in names:
            out.append((*names[f.id], node))
        elif (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules
        ):
            out.append((modules[f.value.id], f.attr, node))
    return out


def _passes_protocol(call: ast.Call, position: int) -> bool:
    if any(k.arg == "protocol" or k.arg is None for k in call.keywords):
        return True
    if any(isinstance(a, ast.Starred) for a in call.args):
        return True
    return 0 <= position < len(call.args)


def test_callers_above_classify_pass_the_runs_protocol():
    wanted = _protocol_functions()
    assert ("breakthrough.classify.regimes", "label_panels") in wanted  # the scan sees them
    seen, missing = 0, []
    for pkg in CALLERS:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for module, name, call in _calls(ast.parse(path.read_text(encoding="utf-8"))):
                if (module, name) not in wanted:
                    continue
                seen += 1
                if not _passes_protocol(call, wanted[(module, name)]):
                    missing.append(f"{path.relative_to(ROOT.parent)}:{call.lineno} {name}")
    assert seen > 0
    assert not missing, "calls that fall back to protocol.DEFAULT: " + ", ".join(missing)


def test_the_scan_catches_a_call_without_the_protocol():
    tree = ast.parse(
        "from breakthrough.classify.regimes import label_panels as lp\n"
        "from breakthrough.classify import plan as P\n"
        "lp(a, b)\nlp(a, b, c, protocol=p)\nP.plan_next(a, b)\n"
    )
    wanted = _protocol_functions()
    got = [(n, _passes_protocol(c, wanted[(m, n)])) for m, n, c in _calls(tree)]
    assert sorted(got) == [("label_panels", False), ("label_panels", True), ("plan_next", False)]
