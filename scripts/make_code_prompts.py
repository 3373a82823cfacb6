#!/usr/bin/env python3
"""Code-completion training prompts for drafters (issue 15: "gsm8k_train plus any other text offline you can
justify; never the evaluation prompts").

Writes data/prompts/code_train.jsonl: one HumanEval-style prompt per documented public top-level function of the
CPython standard library on this machine (its signature and docstring, as the source spells them; the target writes
the body). The standard library is offline and PSF-licensed; HumanEval's problems were written for it, and to keep
even a name out of training, functions named like a HumanEval entry point (data/prompts/humaneval.jsonl: encode,
median, ...) are dropped. Deterministic for a given Python: files in sorted order, the first function of each name
only.

    python3 scripts/make_code_prompts.py [--stdlib /usr/lib/python3.11] [--out data/prompts/code_train.jsonl]

`--methods` writes the documented public methods of public top-level classes instead (the class line, then the
method's signature and docstring as the source indents them; the first method of each Class.method name only;
methods named like a HumanEval entry point dropped), by default to data/prompts/code_train_methods.jsonl: a second,
separate file, so that the shuffled order of the first (and the data recipes that name it) stays as it is.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

SKIP_DIRS = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "turtledemo", "__pycache__",
             "ensurepip", "venv", "pydoc_data"}


PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def documented(body, lines, prefix=""):
    """(name, prompt text) of each documented public function in body: decorators, signature and docstring as the
    source spells them, after prefix (a class line for methods)."""
    for node in body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node, clean=False)
        if not doc or len(doc.strip()) < 40 or not node.body or not isinstance(node.body[0], ast.Expr):
            continue
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        text = prefix + "\n".join(lines[first - 1: node.body[0].end_lineno]) + "\n"
        if len(text) <= 2000:
            yield node.name, text


def prompts_of(path: Path, root: Path, methods: bool):
    """(entry name, unique name, record): top-level functions, or with methods the methods of public classes."""
    src = path.read_text(encoding="utf-8", errors="strict")
    tree = ast.parse(src)
    lines = src.splitlines()
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    if not methods:
        for name, text in documented(tree.body, lines):
            yield name, name, {"prompt": text, "source": f"{PY} stdlib {module}.{name}"}
        return
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name.startswith("_"):
            continue
        header = lines[cls.lineno - 1]
        if not header.rstrip().endswith(":"):  # a class line spread over several lines: skipped
            continue
        for name, text in documented(cls.body, lines, header + "\n"):
            yield name, f"{cls.name}.{name}", {"prompt": text, "source": f"{PY} stdlib {module}.{cls.name}.{name}"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stdlib", type=Path, default=Path(f"/usr/lib/{PY}"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--methods", action="store_true", help="class methods, to code_train_methods.jsonl by default")
    a = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    if a.out is None:
        a.out = repo / ("data/prompts/code_train_methods.jsonl" if a.methods else "data/prompts/code_train.jsonl")
    humaneval = {json.loads(line)["entry_point"] for line in open(repo / "data/prompts/humaneval.jsonl")}
    # Decontaminate: no function or method named like a HumanEval entry point; each unique name once (functions:
    # the name, so no function is named like a HumanEval task or an earlier function; methods: Class.method).
    seen = set(humaneval)
    out = []
    for path in sorted(a.stdlib.rglob("*.py")):
        if SKIP_DIRS & set(path.relative_to(a.stdlib).parts[:-1]) or path.name.startswith("test_"):
            continue
        try:
            found = list(prompts_of(path, a.stdlib, a.methods))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for name, unique, rec in found:
            if name not in humaneval and unique not in seen:
                seen.add(unique)
                out.append(rec)
    a.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    print(f"wrote {a.out} ({len(out)} prompts from {a.stdlib})")


if __name__ == "__main__":
    main()
