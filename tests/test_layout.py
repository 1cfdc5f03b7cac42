"""The architecture as a test: no import cycles, dependencies one way, gradio only in the UI.

Every module's imports are read with ``ast`` (module level and inside functions alike: a lazy
import is still a dependency), resolved to project modules, and checked against the rules in
docs/architecture.md: ``finetune`` <- ``adapters`` <- ``eval`` <- ``ui`` <- ``app.py``; nothing
below ``ui/`` imports gradio; ``finetune/config.py`` imports no torch, transformers or gradio.
The rules run on synthetic trees first, so a checker that cannot fail would show.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"finetune": 0, "adapters": 1, "eval": 2, "ui": 3, "app": 4}  # may import lower only
UI_ONLY = {"gradio"}
LIGHT_MODULES = {"finetune.config": {"torch", "transformers", "gradio"}}


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the project's packages and ``app.py`` under ``root``."""
    found = {}
    for top in LAYERS:
        if (root / f"{top}.py").is_file():
            found[top] = root / f"{top}.py"
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name a file imports (``from a import b`` gives ``a.b``: the module ``a.b``
    if there is one, else the name ``b`` in ``a``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Project module -> project modules it imports, and -> outside top-level names it imports.

    A name resolves to the longest project module it starts with, so ``from finetune.data
    import prepare`` points at ``finetune.data`` and ``from finetune.train import runner`` at
    ``finetune.train.runner``. A package's own ``__init__`` running before its submodules is
    Python's doing, not an edge.
    """
    files = module_files(root)
    graph, external = {}, {}
    for module, path in files.items():
        graph[module], external[module] = set(), set()
        for name in _imported_names(path, module):
            parts = name.split(".")
            target = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in files), None)
            if target is None:
                external[module].add(parts[0])
            elif target != module:
                graph[module].add(target)
    return graph, external


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports that point up the layers (e.g. ``finetune`` importing ``adapters``)."""
    layer = lambda m: LAYERS[m.split(".")[0]]  # noqa: E731
    return sorted(f"{src} imports {dst}" for src, dsts in graph.items() for dst in dsts if layer(dst) > layer(src))


def forbidden_externals(external: dict[str, set[str]]) -> list[str]:
    """gradio outside ui/ and app.py; heavy libraries in the light (config) modules."""
    bad = []
    for module, names in sorted(external.items()):
        if LAYERS[module.split(".")[0]] < LAYERS["ui"]:
            bad += [f"{module} imports {n} (only ui/ and app.py may)" for n in sorted(names & UI_ONLY)]
        bad += [f"{module} imports {n} (a config module stays light)" for n in sorted(names & LIGHT_MODULES.get(module, set()))]
    return bad


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


# --- the checker on synthetic trees: it must catch what it is for -----------------------------


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    root = _tree(tmp_path, {
        "finetune/__init__.py": "",
        "finetune/a.py": "from finetune.b import x\n",
        "finetune/b.py": "def f():\n    from finetune import c\n",
        "finetune/c.py": "import finetune.a\n",
        "finetune/d.py": "from finetune.a import y\n",  # imports into the cycle, not part of it
    })
    graph, _ = import_graph(root)
    assert graph["finetune.b"] == {"finetune.c"}
    assert find_cycles(graph) == [["finetune.a", "finetune.b", "finetune.c"]]


def test_relative_imports_resolve_and_a_clean_tree_has_no_cycle(tmp_path):
    root = _tree(tmp_path, {
        "finetune/__init__.py": "",
        "finetune/data/__init__.py": "from .load import x\n",
        "finetune/data/load.py": "from ..paths import home\n",
        "finetune/paths.py": "import os\n",
    })
    graph, external = import_graph(root)
    assert graph["finetune.data"] == {"finetune.data.load"}
    assert graph["finetune.data.load"] == {"finetune.paths"}
    assert external["finetune.paths"] == {"os"}
    assert find_cycles(graph) == []


def test_upward_imports_gradio_and_torch_in_config_are_named(tmp_path):
    root = _tree(tmp_path, {
        "finetune/__init__.py": "",
        "finetune/config.py": "import torch\n",
        "finetune/train.py": "def f():\n    from eval.metrics import bleu\n",
        "adapters/__init__.py": "",
        "adapters/session.py": "import gradio as gr\nfrom finetune import config\n",
        "eval/__init__.py": "",
        "eval/metrics.py": "",
        "ui/__init__.py": "",
        "ui/tab.py": "import gradio\nfrom eval import metrics\n",
        "app.py": "from ui import tab\n",
    })
    graph, external = import_graph(root)
    assert upward_imports(graph) == ["finetune.train imports eval.metrics"]
    assert forbidden_externals(external) == [
        "adapters.session imports gradio (only ui/ and app.py may)",
        "finetune.config imports torch (a config module stays light)",
    ]


# --- the project itself -----------------------------------------------------------------------


def test_the_project_has_no_import_cycle():
    graph, _ = import_graph(ROOT)
    assert len(graph) > 50 and "finetune.train.loop" in graph  # the real tree was read
    assert find_cycles(graph) == []


def test_dependencies_point_one_way():
    graph, _ = import_graph(ROOT)
    assert upward_imports(graph) == []


def test_gradio_stays_in_the_ui_and_config_stays_light():
    _, external = import_graph(ROOT)
    assert "gradio" in external["ui.app"]  # the UI does import it: the scan sees it
    assert forbidden_externals(external) == []
