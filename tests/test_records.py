"""Records, not dicts: no function that measures returns a bare dict of figures.

A measurement crosses from measure to draw to page as a frozen dataclass with named, typed fields; it becomes a
dict only at the JSON edge (`to_dict`). This reads the source (ast) of every function in the files that measure
and fails on a return annotation that holds an untyped dict (`-> dict`, `-> list[dict]`, `-> tuple[dict, ...]`,
`-> dict | None`, `-> dict[str, Any]`, ...), and on a function without one that returns a dict literal. A dict
typed to the end (`dict[str, list[int]]`: a role -> its key positions) is a mapping whose keys are data, not a
record in disguise, and passes. The planted tests below show each kind caught.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("engine/**/*.py", "topics/*/measure.py", "topics/ladder/profile.py", "benchmarks/*.py")
# where a record becomes a dict on its way to a JSON file (`report`: a whole run, as `--json` writes it), and
# the one place transformers' own per-layer dicts come in, as transformers gives them
JSON_EDGE = ("to_dict", "report", "layer_kinds")

UNTYPED = {"dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict"}
LOOSE = {"Any", "object"}


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def untyped_dict(annotation) -> bool:
    """Does this return annotation hold a dict whose values are not typed (bare, or of Any / object)?"""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        return untyped_dict(ast.parse(annotation.value, mode="eval").body)
    if isinstance(annotation, ast.Subscript):
        args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        if _name(annotation.value) in UNTYPED:
            return len(args) < 2 or _name(args[-1]) in LOOSE or untyped_dict(args[-1])
        return any(untyped_dict(a) for a in args)
    if isinstance(annotation, ast.BinOp):  # X | Y
        return untyped_dict(annotation.left) or untyped_dict(annotation.right)
    if isinstance(annotation, (ast.Tuple, ast.List)):
        return any(untyped_dict(a) for a in annotation.elts)
    return _name(annotation) in UNTYPED


def _returns(fn) -> list:
    """The return statements of fn itself (not of the functions defined inside it)."""
    out, todo = [], list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _dict_built(value) -> bool:
    if isinstance(value, (ast.Dict, ast.DictComp)):
        return True
    if isinstance(value, ast.Call) and _name(value.func) == "dict":
        return True
    if isinstance(value, (ast.List, ast.Tuple)):
        return any(_dict_built(e) for e in value.elts)
    if isinstance(value, ast.ListComp):
        return _dict_built(value.elt)
    return False


def violations(source: str, path: str) -> list[str]:
    """'path:line name -> what' for each function of the source that returns an untyped dict."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name in JSON_EDGE:
            continue
        if node.returns is not None:
            if untyped_dict(node.returns):
                out.append(f"{path}:{node.lineno} {node.name} -> {ast.unparse(node.returns)}")
        elif any(_dict_built(v) for v in _returns(node)):
            out.append(f"{path}:{node.lineno} {node.name} returns a dict built in place, unannotated")
    return out


def scanned() -> list[Path]:
    return sorted({p for pattern in SCANNED for p in ROOT.glob(pattern)})


# ------------------------------------------------------------------ the house as it is


def test_no_function_that_measures_returns_a_bare_dict_of_figures():
    found = [v for p in scanned() for v in violations(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]
    assert not found, ("return a frozen dataclass with named, typed fields (to_dict() at the JSON edge):\n"
                       + "\n".join(found))


def test_the_scan_reads_every_file_that_measures():
    files = {p.relative_to(ROOT).as_posix() for p in scanned()}
    assert {"topics/budget/measure.py", "topics/race/measure.py", "benchmarks/bench.py"} <= files


# ------------------------------------------------------------------ planted violations are caught


PLANTED = '''
def a() -> dict: ...
def b() -> list[dict]: ...
def c() -> tuple[dict, ...]: ...
def d(x) -> dict | None: ...
def e() -> "dict": ...
def f() -> Optional[Dict]: ...
def g() -> dict[str, Any]: ...
def h() -> tuple[list[int], dict[str, object]]: ...
def i():
    return {"wall_ms": 1.0}
def j():
    return [{"size": s} for s in (1, 2)]
class K:
    def figures(self) -> typing.Dict: ...
'''

CLEAN = '''
def roles() -> dict[str, list[int]]: ...
def fit() -> Fit: ...
def rows() -> list[Row]: ...
class Fit:
    def to_dict(self) -> dict: ...
def outer():
    def inner() -> dict[str, int]:
        return {"typed": 1}
    return Fit(inner())
'''


def test_a_planted_bare_dict_of_every_kind_is_caught():
    found = violations(PLANTED, "planted.py")
    assert [v.split(" ")[1] for v in found] == list("abcdefghij") + ["figures"], found


def test_typed_mappings_records_and_the_json_edge_pass():
    assert violations(CLEAN, "clean.py") == [], violations(CLEAN, "clean.py")


def test_a_planted_violation_in_a_real_file_is_caught():
    path = "topics/race/measure.py"
    source = (ROOT / path).read_text(encoding="utf-8") + "\n\ndef planted(a) -> dict:\n    return {}\n"
    assert [v for v in violations(source, path) if v.endswith("planted -> dict")]
