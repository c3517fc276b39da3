"""The engine's layers: no import runs back up them (the order is stated in engine/__init__.py), and no module
under engine/ imports streamlit."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
# each module's layer, from the bottom: a module may import its own layer and those before it
ORDER = [("errors", "units", "paths", "share", "device"), ("forward",), ("load",), ("generate",), ("measure",),
         ("draw",), ("follow",), ("cli", "__main__")]
LAYER = {name: i for i, names in enumerate(ORDER) for name in names}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in the file, at the top or inside a function: both run."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: a relative import; write engine.… in full"
            if node.module == "engine":  # from engine import device
                out += [(node.lineno, f"engine.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, node.module))
    return out


def layer_of(module: str) -> str:
    """engine.forward.run -> forward; engine.device -> device."""
    return module.split(".")[1]


def engine_files() -> list[Path]:
    return [p for p in sorted(ENGINE.rglob("*.py")) if p != ENGINE / "__init__.py"]  # the package's front door


def test_every_engine_module_has_a_layer():
    assert {layer_of("engine." + ".".join(p.relative_to(ENGINE).with_suffix("").parts)) for p in engine_files()} \
        <= set(LAYER)


def test_no_import_runs_back_up_the_layers():
    back_up = []
    for path in engine_files():
        here = layer_of("engine." + ".".join(path.relative_to(ENGINE).with_suffix("").parts))
        for line, module in imports(path):
            if module.startswith("engine.") and LAYER[layer_of(module)] > LAYER[here]:
                back_up.append(f"engine/{path.relative_to(ENGINE)}:{line} ({here}) imports {module}")
    assert not back_up, "\n".join(back_up)


def test_the_order_is_the_one_engine_init_states():
    import engine

    stated = " < ".join(", ".join(names) for names in ORDER)
    assert stated in " ".join(engine.__doc__.split())


def test_the_engine_never_imports_streamlit():
    found = [f"engine/{p.relative_to(ENGINE)}:{line}" for p in [ENGINE / "__init__.py", *engine_files()]
             for line, module in imports(p) if module.split(".")[0] == "streamlit"]
    assert not found, found
