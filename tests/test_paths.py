"""Every place in the house the docs and the code's own words point to exists.

Read: every Markdown file (README.md, docs/, the assets' READMEs) and the docstrings and comments of every Python
file. Checked:

    paths       `engine/forward/run.py`, `assets/held_out/`, `topics/*/measure.py`, `assets/budget_sweep_<model>.json`
                (a <placeholder>, an UPPERCASE word or * stands for any name), `engine/forward/run.py:run_pass` (the
                name defined in that file), `classroom/page.class_bar` (a file's name without .py, then a name in it)
    modules     `engine.forward.capture`, `topics.ladder.profile.matmuls_alone`: a module of the house, then a name
                defined in it; a two-part name whose second part is no module (`step.rows`: a variable) is prose
    file names  a bare `capture.py` names a file of the house; OTHER_PROJECTS are the few cited from elsewhere
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOUSE = ("engine", "drawing", "ui", "classroom", "topics", "step", "lessons", "pages", "benchmarks", "commands",
         "deploy", "tools", "tests")
TOPS = "|".join(HOUSE + ("assets", "docs", r"\.ci", r"\.streamlit"))
PATH = re.compile(rf"(?<![\w./<>*-])((?:{TOPS})/[\w.<>*/-]*[\w>*/])(?::(\w+))?")
MODULE = re.compile(rf"(?<![\w./-])((?:{'|'.join(HOUSE)})(?:\.\w+)+)")
BARE = re.compile(r"(?<![\w./<>*-])(\w[\w-]*\.py)\b(?![\w/])")
OTHER_PROJECTS = {
    "block_manager.py",  # nano-vllm's, cited by engine/generate/serving/blocks.py
    "snapkv_utils.py",  # SnapKV's, cited by topics/budget/evict.py
    "shared.py",  # tests/test_browser.py: a file Streamlit must never list as a page
}


def house_files() -> list[Path]:
    """Every Markdown and Python file of the house (not .git, a virtual environment, caches)."""
    return sorted(p for p in ROOT.rglob("*") if p.suffix in (".md", ".py") and p.is_file()
                  and not any(part.startswith(".") or part in ("__pycache__", "node_modules", "venv")
                              for part in p.relative_to(ROOT).parts[:-1]))


def words(path: Path) -> list[tuple[int, str]]:
    """(line, text) of what the file says: all of a Markdown file; a Python file's docstrings and comments."""
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return list(enumerate(source.splitlines(), 1))
    out = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
    for node in statements(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    return out


def statements(tree: ast.Module):
    """The module and every statement in it, however nested (a def in an if, a class in a function), without the
    expressions inside them: only a module, a def or a class holds a docstring, and ast.walk's visit of every
    expression node was most of this test's time."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                todo += [n for n in block if isinstance(n, (ast.stmt, ast.excepthandler, ast.match_case))]


@cache
def defined(path: Path) -> frozenset[str]:
    """Names a module defines or imports at its top level, and the methods of its classes."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def path_exists(text: str, name: str | None, root: Path = ROOT) -> bool:
    pattern = re.sub(r"<[^>]*>|\b[A-Z][A-Z_]+\b(?=[./]|$)", "*", text)  # <model>, NAME: any name
    if "*" in pattern:
        return any(root.glob(pattern.rstrip("/")))
    target = root / pattern
    if target.exists():
        return name is None or target.suffix != ".py" or name in defined(target)
    stem, dot, attr = pattern.rpartition(".")  # classroom/page.class_bar: a file's name without .py, then a name
    module = root / f"{stem}.py"
    return bool(dot) and module.is_file() and attr in defined(module)


def module_exists(dotted: str, root: Path = ROOT) -> bool:
    parts = dotted.split(".")
    if not (root / parts[0]).is_dir():  # not a package of this tree
        return True
    here = root
    for i, part in enumerate(parts):
        if (here / part).is_dir():
            here = here / part
        elif (here / f"{part}.py").is_file():
            rest = parts[i + 1:]
            return not rest or rest[0] in defined(here / f"{part}.py")
        elif (here / "__init__.py").is_file() and part in defined(here / "__init__.py"):
            return True
        else:
            return len(parts) == 2 and i == 1  # `step.rows`: a variable's attribute, not a module path
    return True


def dead_references(files, root: Path = ROOT) -> list[str]:
    """'file:line: what' for every path, module and file name the files' words name that the house lacks."""
    names = {p.name for p in house_files()} if root == ROOT else {p.name for p in root.rglob("*.py")}
    out = []
    for path in files:
        name = path.relative_to(root).as_posix()
        for first, text in words(path):
            line = lambda m: first + text.count("\n", 0, m.start())  # noqa: E731 - the match's own line
            out += [f"{name}:{line(m)}: {m.group(0)}" for m in PATH.finditer(text)
                    if not path_exists(*m.groups(), root)]
            out += [f"{name}:{line(m)}: {m.group(1)}" for m in MODULE.finditer(text)
                    if not module_exists(m.group(1), root)]
            out += [f"{name}:{line(m)}: {m.group(1)}" for m in BARE.finditer(text)
                    if m.group(1) not in names | OTHER_PROJECTS]
    return out


def test_every_path_module_and_file_the_docs_and_docstrings_name_exists():
    dead = dead_references(house_files())
    assert not dead, "named but not in the house (fix the words, or the path):\n" + "\n".join(dead)


def test_the_scan_reads_the_docs_the_assets_readmes_and_the_code():
    read = {p.relative_to(ROOT).as_posix() for p in house_files()}
    assert {"README.md", "docs/code.md", "assets/tokenizers/gpt2/README.md", "engine/forward/run.py", "app.py",
            "tests/test_paths.py"} <= read
    assert not any(p.startswith((".git/", ".venv/")) for p in read)


def test_planted_dead_references_of_every_kind_are_caught(tmp_path):
    (tmp_path / "engine" / "forward").mkdir(parents=True)
    (tmp_path / "step").mkdir()
    (tmp_path / "engine" / "__init__.py").write_text("")
    (tmp_path / "engine" / "forward" / "__init__.py").write_text("")
    (tmp_path / "engine" / "forward" / "run.py").write_text('"""One pass."""\n\ndef run_pass():\n    pass\n')
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "budget_sweep_default.json").write_text("{}")
    doc = tmp_path / "README.md"
    alive = ("`engine/forward/run.py`, `engine/forward/run.py:run_pass`, `engine/forward/run.run_pass`, "
             "`engine.forward.run.run_pass`, `assets/budget_sweep_<model>.json`, `engine/forward/NAME.py`, run.py, "
             "`step.rows` of a variable")
    doc.write_text(alive + "\n")
    assert dead_references([doc], tmp_path) == []
    dead = ["engine/forward/gpt2.py", "engine/forward/run.py:walk", "engine/forward/run.nothing",
            "engine.forward.run.nothing", "engine.forward.sweep.sweep_at", "assets/ladder_<device>.json", "share.py"]
    doc.write_text("\n".join(f"see `{d}` here" for d in dead) + "\n")
    found = dead_references([doc], tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == dead, found
    code = tmp_path / "engine" / "forward" / "run.py"
    code.write_text('"""Reads engine/forward/gpt2.py."""\n\n# and classroom/classroom.py\nX = "engine/nowhere.py"\n')
    assert [f.split(": ", 1)[1] for f in dead_references([code], tmp_path)] == ["classroom/classroom.py",
                                                                              "engine/forward/gpt2.py"]
