"""Print, as Markdown, every training and timing claim of the solution notebooks: the threshold and the measured range.

    .venv/bin/python benchmarks/claims_table.py > /tmp/claims.md   # docs/guide/measurements.md quotes its output

Reads the notebooks' claim calls (``claim_at_least``, ``claim_at_most``, ``claim_between``, ``claim_greater``,
``claim_all_at_least``, ``claim``) that carry ``measured=``; facts (``kind="fact"``) hold on every machine and are left out.
A part of a name or range computed at run time shows as "…".
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
SYMBOLS = {"claim_at_least": "≥", "claim_at_most": "≤", "claim_all_at_least": "all ≥"}
CLAIMS = {*SYMBOLS, "claim_between", "claim_greater", "claim"}


def text(node: ast.expr) -> str:
    """A string literal as written; an f-string with each replacement field as "…"; other code as source."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = (str(v.value) if isinstance(v, ast.Constant) else "…" for v in node.values)
        return "".join(parts).rstrip(", …").strip()
    return ast.unparse(node)


def threshold(call: ast.Call, keywords: dict[str, ast.expr]) -> str:
    name, args = call.func.id, call.args
    if name == "claim_between":
        return f"{ast.unparse(args[2])} to {ast.unparse(args[3])}"
    if name == "claim_greater":
        margin = keywords.get("margin") or (args[4] if len(args) > 4 else None)
        return f"> {text(args[2])}" + (f" by {ast.unparse(margin)}" if margin is not None else "")
    if name == "claim":
        return "holds"
    return f"{SYMBOLS[name]} {ast.unparse(args[2])}"


def rows(path: Path) -> list[tuple[str, str, str]]:
    found = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code" or "claim" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CLAIMS):
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            kind = keywords.get("kind")
            if "measured" not in keywords or (isinstance(kind, ast.Constant) and kind.value == "fact"):
                continue
            cells = (text(node.args[0]), threshold(node, keywords), text(keywords["measured"]))
            found.append(tuple(c.replace("|", "\\|") for c in cells))
    return found


def main() -> None:
    for path in sorted((ROOT / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb")):
        print(f"\n### {path.stem}\n")
        table = rows(path)
        if not table:
            print("No training or timing claim: every claim of this notebook is a fact, true on every machine.")
            continue
        print("| claim | threshold | measured |\n|---|---|---|")
        for row in table:
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
