"""The helper package's layout reads as the course does, and no import runs from a lower layer to a higher one.

Layers, lowest first (``helpers/__init__.py`` says the same in words): a module imports from its own layer and the
layers below it, never from above, so that the runtime support sits below the models that use it, and the authoring
tools above everything a learner's notebook runs. Function-level imports count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from helpers import ROOT

LAYERS: tuple[tuple[str, ...], ...] = (
    ("helpers.runtime",),
    ("helpers.attention", "helpers.blocks", "helpers.training"),
    ("helpers.data",),
    ("helpers.models", "helpers.tokenizers", "helpers.scale", "helpers.handwritten", "helpers.chat"),
    ("helpers.plots",),
    ("helpers.checks",),
    ("helpers.grading", "helpers.authoring"),
)
#: The package's top level: the facade ``helpers/__init__.py`` and the foundations; every other module in a sub-package.
TOP_LEVEL = {"__init__.py", "attention.py", "blocks.py", "training.py"}


def _layer(module: str) -> int | None:
    if module == "helpers":  # the facade re-exports helpers.runtime.session
        return 0
    for depth, names in enumerate(LAYERS):
        if any(module == name or module.startswith(name + ".") for name in names):
            return depth
    return None


def _modules() -> list[Path]:
    return sorted((ROOT / "helpers").rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module + ("." + alias.name if node.module == "helpers" else "")) for alias in node.names]
    return [(line, name) for line, name in found if name == "helpers" or name.startswith("helpers.")]


def test_every_module_has_a_layer():
    assert [_name(p) for p in _modules() if _layer(_name(p)) is None] == []


def test_top_level_holds_only_the_foundations():
    loose = sorted(p.name for p in (ROOT / "helpers").glob("*.py") if p.name not in TOP_LEVEL)
    assert loose == [], f"give these modules a place in a sub-package (see helpers/__init__.py): {loose}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _name(p))
def test_no_import_from_a_higher_layer(path):
    own = _layer(_name(path))
    upward = []
    for line, imported in _imports(path):
        target = _layer(imported)
        if target is None and imported.startswith("helpers.") and imported.rsplit(".", 1)[0] != "helpers":
            target = _layer(imported.rsplit(".", 1)[0])  # `from helpers.x import name`: the module is helpers.x
        if target is not None and own is not None and target > own and _name(path) != "helpers":
            upward.append(f"line {line}: {imported} (layer {target} > {own})")
    assert upward == [], f"{_name(path)} imports from a higher layer: {upward}"
