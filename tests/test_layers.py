"""The house's shape, as README's "Layout" states it: no import runs back up the layers, the core never imports a
topic, topics never import each other, only page files import streamlit (and no page file imports torch), and the
classroom reaches the step page only through its API (ui/step_state.py).

Each rule is a function of the import graph read from the source (`graph`), so a test can plant a violation in a
copy of the graph and see the rule catch it (the `planted` tests below).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the layers, lowest first: a module may import its own layer and those below it
LAYERS = [
    ("engine",),  # the core: load, forward, generate (it thinks; it draws nothing)
    ("physics",),  # the core's passes against the device: the roofline, KV sizes, the rungs, a request timed
    ("drawing",),  # what several pages draw from the core's records: palette, the stage, the step's views
    ("ui",),  # what every page shares: the controller, the sidebar, the style, links, the step page's API
    ("classroom", "topics"),  # the classroom wing; one folder per topic (ladder, serving, speculative, race, budget, bytes)
    ("step", "lessons"),  # the step page and the lessons, which quote the topics
    ("pages", "app", "benchmarks", "commands", "deploy", "tools"),  # doors and commands
]
# inside the core, its own order (engine/__init__.py states it)
CORE = [("errors", "paths", "device", "timing", "pins", "torch_internals", "transformers_internals"), ("forward",),
        ("load",), ("generate",), ("__main__",)]
PAGE_FOLDERS = ("pages", "ui", "lessons")  # besides app.py and any file named page*.py: a page file
PACKAGES = ("engine", "physics", "drawing", "commands", "ui", "classroom", "topics", "step", "lessons", "pages", "benchmarks", "deploy", "tools")


def imports(module: str, text: str) -> list[tuple[int, str]]:
    """(line, module) of every import in the module's source, at the top or inside a function: both run."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}:{node.lineno}: a relative import; write the module in full"
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]  # a module or a name in it
    return out


def module_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def house_files() -> list[Path]:
    return [ROOT / "app.py"] + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


@functools.cache
def _house_sources() -> dict[str, str]:
    return {module_of(p): p.read_text(encoding="utf-8") for p in house_files()}


@functools.cache
def _imports_of_the_house() -> dict[str, tuple[tuple[int, str], ...]]:
    """Every file of the house, read and parsed once a session (every rule and every planted test reads them)."""
    return {m: tuple(imports(m, text)) for m, text in _house_sources().items()}


def graph() -> dict[str, list[tuple[int, str]]]:
    """Every source module of the house -> the modules of the house it imports (line, module): a fresh copy, so a
    test may plant a violation in it."""
    ours = set(PACKAGES) | {"app"}
    return {m: [(line, to) for line, to in found if to.split(".")[0] in ours | {"streamlit", "torch"}]
            for m, found in _imports_of_the_house().items()}


def layer(module: str) -> int:
    """engine.__main__ -> the doors' layer; engine.forward.run -> the core's; topics.serving.page -> the topics'."""
    for i, names in reversed(list(enumerate(LAYERS))):
        if any(module == n or module.startswith(n + ".") for n in names):
            return i
    raise AssertionError(f"{module}: in no layer of LAYERS")


def is_page_file(module: str) -> bool:
    parts = module.split(".")
    return module == "app" or parts[0] in PAGE_FOLDERS or parts[-1] == "page" or parts[-1].startswith("page_")


def topic(module: str) -> str | None:
    """topics.ladder.record -> ladder: a topic is a folder of topics/ (topics/cli_args.py, beside them, is shared)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "topics" and len(parts) > 2 and (ROOT / "topics" / parts[1]).is_dir() else None


# ------------------------------------------------------------------ the rules, as functions of a graph


def runs_back_up(g) -> list[str]:
    return [f"{m}:{line} imports {to}" for m, found in g.items() for line, to in found
            if to.split(".")[0] not in ("streamlit", "torch") and layer(to) > layer(m)]


def core_order_broken(g) -> list[str]:
    order = {name: i for i, names in enumerate(CORE) for name in names}
    out = []
    for m, found in g.items():
        if m.split(".")[0] != "engine" or m.split(".")[-1] == "__init__":  # a package's front door hands names on
            continue
        here = order[m.split(".")[1]]
        for line, to in found:
            if to.startswith("engine.") and order.get(to.split(".")[1], -1) > here:
                out.append(f"{m}:{line} imports {to}")
    return out


def core_imports_a_topic(g) -> list[str]:
    return [f"{m}:{line} imports {to}" for m, found in g.items() if layer(m) == 0 for line, to in found
            if to.split(".")[0] not in ("engine", "torch")]


def topics_import_each_other(g) -> list[str]:
    return [f"{m}:{line} imports {to}" for m, found in g.items() if topic(m) for line, to in found
            if topic(to) and topic(to) != topic(m)]


def streamlit_outside_pages(g) -> list[str]:
    return [f"{m}:{line}" for m, found in g.items() if not is_page_file(m) for line, to in found
            if to.split(".")[0] == "streamlit"]


def torch_in_pages(g) -> list[str]:
    return [f"{m}:{line}" for m, found in g.items() if is_page_file(m) for line, to in found
            if to.split(".")[0] == "torch"]


def classroom_around_the_api(g, sources: dict[str, str]) -> list[str]:
    """The classroom reaches the step page only through ui.step_state: no import of step/, no controller of its
    own, no step page key spelled out."""
    out = [f"{m}:{line} imports {to}" for m, found in g.items() if m.startswith("classroom.") for line, to in found
           if to.startswith(("step.", "ui.controller"))]
    return out + [m for m, text in sources.items() if m.startswith("classroom.")
                  and ('"step_' in text or "'step_" in text or "Controller(" in text)]


def sources() -> dict[str, str]:
    return {m: text for m, text in house_sources().items() if m.split(".")[0] == "classroom"}


# ------------------------------------------------------------------ the house as it is


def test_every_module_of_the_house_is_in_a_layer():
    for m in graph():
        layer(m)


def test_no_import_runs_back_up_the_layers():
    assert not runs_back_up(graph())


def test_inside_the_core_each_folder_imports_only_those_below_it():
    assert not core_order_broken(graph())


def test_the_core_never_imports_a_topic_the_classroom_or_a_page():
    assert not core_imports_a_topic(graph())


def test_topics_never_import_each_other():
    assert not topics_import_each_other(graph())


def test_only_page_files_import_streamlit():
    assert not streamlit_outside_pages(graph())


def test_no_page_file_imports_torch():
    assert not torch_in_pages(graph())


def test_the_classroom_reaches_the_step_page_only_through_its_api():
    assert not classroom_around_the_api(graph(), sources())


def test_the_cores_order_is_the_one_engine_init_states():
    import engine

    stated = " < ".join(", ".join(names) for names in CORE)
    assert stated in " ".join(engine.__doc__.split())


DRAWING_LIBRARIES = ("plotly", "matplotlib")


def draws_in_the_core(g_all) -> list[str]:
    """The core thinks: no module of engine/ or physics/ imports a drawing library (drawing/ and the topics' draw.py
    do)."""
    return [f"{m}:{line} imports {to}" for m, found in g_all.items() if m.split(".")[0] in ("engine", "physics")
            for line, to in found if to.split(".")[0] in DRAWING_LIBRARIES]


def imports_by_name(sources_of: dict[str, str]) -> list[str]:
    """A module imported from a string (importlib.import_module, __import__) is an edge the graph cannot see."""
    return [m for m, text in sources_of.items() if "import_module(" in text or "__import__(" in text]


def reexport_shims(sources_of: dict[str, str]) -> list[str]:
    """A module that only hands on names imported from elsewhere (besides a package's __init__): two names for
    one thing."""
    return [m for m, text in sources_of.items() if not m.endswith("__init__") and only_imports(text)]


@functools.cache
def only_imports(text: str) -> bool:
    """Whether a source's top level is imports alone, a docstring aside. Read once per text; the syntax tree is not
    kept: every module's tree, held for the session, made each later garbage-collection pass of the worker ~0.1 s."""
    body = [n for n in ast.parse(text).body
            if not (isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant))]
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body)


def all_imports() -> dict[str, list[tuple[int, str]]]:
    """Every import of every package's modules (app.py aside), the libraries' too: a fresh copy."""
    return {m: list(found) for m, found in _imports_of_the_house().items() if m != "app"}


def house_sources() -> dict[str, str]:
    """Module -> its source text, read once a session: a fresh dict, so a test may plant a line in it."""
    return dict(_house_sources())


def test_the_core_imports_no_drawing_library():
    assert not draws_in_the_core(all_imports())


def test_no_module_is_imported_from_a_string():
    assert not imports_by_name(house_sources())


def test_no_module_only_re_exports_another():
    assert not reexport_shims(house_sources())


def test_a_core_that_draws_an_import_by_name_and_a_shim_are_caught():
    g = all_imports()
    g["engine.forward.trace"] = g["engine.forward.trace"] + [(1, "plotly.graph_objects")]
    g["physics.roofline"] = g["physics.roofline"] + [(1, "matplotlib.pyplot")]
    assert draws_in_the_core(g) == ["engine.forward.trace:1 imports plotly.graph_objects",
                                    "physics.roofline:1 imports matplotlib.pyplot"]
    src = house_sources()
    src["commands.main"] += "\nimportlib.import_module('topics.ladder.cli')\n"
    assert imports_by_name(src) == ["commands.main"]
    src["engine.load.device"] = '"""Shim."""\nfrom engine.device import sync  # noqa: F401\n'
    assert reexport_shims(src) == ["engine.load.device"]


# ------------------------------------------------------------------ each rule catches what it guards against


@pytest.mark.parametrize("module, planted, rule", [
    ("engine.forward.run", "topics.serving.measure", runs_back_up),
    ("engine.forward.run", "engine.generate.loop", core_order_broken),
    ("engine.generate.loop", "topics.ladder.record", core_imports_a_topic),
    ("topics.race.measure", "topics.ladder.record", topics_import_each_other),
    ("topics.race.measure", "streamlit", streamlit_outside_pages),
    ("drawing.stage", "streamlit", streamlit_outside_pages),
    ("physics.roofline", "drawing.stage", runs_back_up),
    ("drawing.stage", "ui.style", runs_back_up),
    ("topics.ladder.cli", "commands.main", runs_back_up),
    ("topics.race.page", "torch", torch_in_pages),
    ("ui.sidebar", "classroom.page", runs_back_up),
])
def test_a_planted_violation_is_caught(module, planted, rule):
    g = graph()
    assert not rule(g)
    g[module] = g[module] + [(1, planted)]
    assert rule(g) == [f"{module}:1 imports {planted}" if rule not in (streamlit_outside_pages, torch_in_pages)
                       else f"{module}:1"]


def test_a_classroom_that_reaches_around_the_api_is_caught():
    g, src = graph(), sources()
    assert not classroom_around_the_api(g, src)
    g["classroom.page_poll"] = g["classroom.page_poll"] + [(1, "ui.controller.Controller")]
    src["classroom.page"] = src["classroom.page"] + '\nst.session_state["step_at"] = 3\n'
    assert classroom_around_the_api(g, src) == ["classroom.page_poll:1 imports ui.controller.Controller",
                                                "classroom.page"]
