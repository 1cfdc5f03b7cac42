"""The architecture as a test: which package may import which, no cycles, no private imports.

Every module's imports are read with ``ast`` (module level and inside functions alike: a lazy
import is still a dependency), resolved to project modules, and checked against the table in
docs/architecture.md (``ALLOWED``), for cycles between modules and between (sub)packages, for
private names imported across modules, gradio below ``ui/``, and torch at import in ``core/``
and the config module. The rules run on synthetic trees first, so a checker that cannot fail
would show.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# top-level package -> the top-level packages it may import (itself included)
ALLOWED = {
    "core": {"core"},
    "adapters": {"core", "adapters"},
    "knowledge": {"core", "knowledge"},
    "finetune": {"core", "adapters", "knowledge", "finetune"},
    "inference": {"core", "adapters", "inference"},
    "feedback": {"core", "feedback"},
    "serve": {"core", "adapters", "inference", "feedback", "knowledge", "serve"},
    "eval": {"core", "adapters", "finetune", "inference", "serve", "feedback", "knowledge", "eval"},
    "ui": {
        "core",
        "adapters",
        "finetune",
        "inference",
        "serve",
        "eval",
        "feedback",
        "knowledge",
        "ui",
    },
    "app": {"core", "serve", "ui"},
    "bench": {
        "core",
        "adapters",
        "finetune",
        "inference",
        "serve",
        "eval",
        "feedback",
        "knowledge",
        "bench",
    },
}
UI_ONLY = {"gradio"}
HEAVY = {"torch", "transformers", "peft", "gradio"}
LIGHT_AT_IMPORT = ("core.", "finetune.config")  # no heavy library at module level


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the project's packages and ``app.py`` under ``root``."""
    found = {}
    for top in ALLOWED:
        if (root / f"{top}.py").is_file():
            found[top] = root / f"{top}.py"
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else []:
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(path: Path, module: str) -> list[tuple[str, bool]]:
    """Every dotted name a file imports, with whether the import is at module level
    (``from a import b`` gives ``a.b``: the module ``a.b`` if there is one, else the name ``b``
    in ``a``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(alias.name, id(node) in top_level) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from this module's package
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names += [(f"{base}.{alias.name}", id(node) in top_level) for alias in node.names]
    return names


def import_graph(root: Path):
    """Project module -> project modules it imports; -> outside top-level names it imports;
    -> outside names imported at module level; and the private names imported across modules.

    A name resolves to the longest project module it starts with, so ``from finetune.data
    import prepare`` points at ``finetune.data``.
    """
    files = module_files(root)
    graph, external, at_import, private = {}, {}, {}, []
    for module, path in files.items():
        graph[module], external[module], at_import[module] = set(), set(), set()
        for name, top_level in _imports(path, module):
            parts = name.split(".")
            target = next(
                (
                    ".".join(parts[:n])
                    for n in range(len(parts), 0, -1)
                    if ".".join(parts[:n]) in files
                ),
                None,
            )
            if target is None:
                external[module].add(parts[0])
                if top_level:
                    at_import[module].add(parts[0])
            elif target != module:
                graph[module].add(target)
                leaf = name[len(target) + 1 :] if name != target else ""
                if leaf.startswith("_") and not leaf.startswith("__"):
                    private.append(f"{module} imports {leaf} from {target}")
    return graph, external, at_import, sorted(private)


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one node (Tarjan), each as a sorted list."""
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


def package_graph(graph: dict[str, set[str]], root: Path) -> dict[str, set[str]]:
    """The module graph folded onto (sub)packages: each module counts as the package it is in.
    A ``__main__`` is left out: it is an entry point that nothing imports, so no cycle runs
    through it."""
    files = module_files(root)

    def package(m: str) -> str:
        return m if files[m].name == "__init__.py" or "." not in m else m.rpartition(".")[0]

    folded: dict[str, set[str]] = {}
    for src, dsts in graph.items():
        if src.endswith("__main__"):
            continue
        folded.setdefault(package(src), set()).update(
            package(d) for d in dsts if package(d) != package(src)
        )
    return folded


def disallowed_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports the table does not allow (e.g. ``core`` importing ``finetune``, anything
    importing ``bench``)."""
    top = lambda m: m.split(".")[0]  # noqa: E731
    return sorted(
        f"{src} imports {dst}"
        for src, dsts in graph.items()
        for dst in dsts
        if top(dst) not in ALLOWED[top(src)]
    )


def forbidden_externals(external: dict[str, set[str]], at_import: dict[str, set[str]]) -> list[str]:
    """gradio outside ui/ and app.py; heavy libraries at import in core/ and the config."""
    bad = []
    for module, names in sorted(external.items()):
        if module.split(".")[0] not in ("ui", "app"):
            bad += [
                f"{module} imports {n} (only ui/ and app.py may)" for n in sorted(names & UI_ONLY)
            ]
        if module.startswith(LIGHT_AT_IMPORT) or module == "core":
            bad += [
                f"{module} imports {n} at import (a light module)"
                for n in sorted(at_import[module] & HEAVY)
            ]
    return bad


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


# --- the checker on synthetic trees: it must catch what it is for -----------------------------


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "finetune/__init__.py": "",
            "finetune/a.py": "from finetune.b import x\n",
            "finetune/b.py": "def f():\n    from finetune import c\n",
            "finetune/c.py": "import finetune.a\n",
            "finetune/d.py": "from finetune.a import y\n",  # imports into the cycle, not part of it
        },
    )
    graph, *_ = import_graph(root)
    assert graph["finetune.b"] == {"finetune.c"}
    assert find_cycles(graph) == [["finetune.a", "finetune.b", "finetune.c"]]


def test_relative_imports_resolve_and_a_clean_tree_has_no_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "finetune/__init__.py": "",
            "finetune/data/__init__.py": "from .load import x\n",
            "finetune/data/load.py": "from ..config import home\n",
            "finetune/config.py": "import os\n",
        },
    )
    graph, external, *_ = import_graph(root)
    assert graph["finetune.data"] == {"finetune.data.load"}
    assert graph["finetune.data.load"] == {"finetune.config"}
    assert external["finetune.config"] == {"os"}
    assert find_cycles(graph) == []


def test_a_cycle_between_subpackages_is_found_where_modules_have_none(tmp_path):
    root = _tree(
        tmp_path,
        {
            "serve/__init__.py": "",
            "serve/engines.py": "from serve.batching.scheduler import S\n",
            "serve/ticket.py": "",
            "serve/batching/__init__.py": "",
            "serve/batching/scheduler.py": "from serve.ticket import Ticket\n",
        },
    )
    graph, *_ = import_graph(root)
    assert find_cycles(graph) == []
    assert find_cycles(package_graph(graph, root)) == [["serve", "serve.batching"]]


def test_disallowed_imports_private_names_and_heavy_imports_are_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "core/__init__.py": "",
            "core/paths.py": "import torch\ndef f():\n    import transformers\n",
            "finetune/__init__.py": "",
            "finetune/config.py": "from core.paths import _helper, __version__\n",
            "finetune/train.py": "def f():\n    from eval.metrics import bleu\n",
            "inference/session.py": "import gradio as gr\nfrom finetune import config\n",
            "eval/__init__.py": "",
            "eval/metrics.py": "from bench import x\n",
            "bench/__init__.py": "",
            "ui/__init__.py": "",
            "ui/tab.py": "import gradio\nfrom eval import metrics\n",
            "app.py": "from ui import tab\n",
        },
    )
    graph, external, at_import, private = import_graph(root)
    assert disallowed_imports(graph) == [
        "eval.metrics imports bench",
        "finetune.train imports eval.metrics",
        "inference.session imports finetune.config",
    ]
    assert forbidden_externals(external, at_import) == [
        "core.paths imports torch at import (a light module)",
        "inference.session imports gradio (only ui/ and app.py may)",
    ]
    assert private == ["finetune.config imports _helper from core.paths"]


# --- the project itself -----------------------------------------------------------------------


def test_the_project_has_no_import_cycle_between_modules_or_packages():
    graph, *_ = import_graph(ROOT)
    assert len(graph) > 50 and "finetune.train.loop" in graph  # the real tree was read
    assert find_cycles(graph) == []
    assert find_cycles(package_graph(graph, ROOT)) == []


def test_imports_follow_the_table():
    graph, *_ = import_graph(ROOT)
    assert disallowed_imports(graph) == []


def test_no_private_name_is_imported_across_modules():
    *_, private = import_graph(ROOT)
    assert private == []


def test_gradio_stays_in_the_ui_and_core_stays_light():
    _, external, at_import, _ = import_graph(ROOT)
    assert "gradio" in external["ui.app"]  # the UI does import it: the scan sees it
    assert forbidden_externals(external, at_import) == []


def test_every_package_on_disk_is_in_the_table():
    tops = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert tops == set(ALLOWED) - {"app"}
