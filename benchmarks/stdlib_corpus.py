"""A many-class, imbalanced corpus built from this machine's Python: the docstrings of the
standard library (modules, classes, functions, methods), each labelled by its top-level
module or package, written as a folder of class folders that ingest reads.

    .venv/bin/python benchmarks/stdlib_corpus.py /tmp/stdlib-corpus

What users bring looks like this, not like BBC: many classes (116 with Python 3.11 at the default
--min-docs 15) from a few dozen documents to several hundred, and near-duplicate siblings with
different labels: posixpath / ntpath, _pyio / io, _pydecimal / decimal, asyncio /
concurrent (Future), os / shutil, the same docstring in two modules. Sources are parsed
(ast), never imported, except the public modules whose members are written in C (os.stat,
math.sqrt, builtins): those are imported to read their __doc__. The test suites, site-packages
and modules that act when imported (this, antigravity) are left out. The same Python gives
the same corpus: the files are walked and written in sorted order. Nothing is committed:
build it where a benchmark needs it (benchmarks/corpora.py does, for many_class.py and recipes.py).
"""
from __future__ import annotations

import argparse
import ast
import collections
import importlib
import inspect
import logging
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path

log = logging.getLogger("stdlib-corpus")
LEFT_OUT = {"site-packages", "test", "tests", "idle_test", "__pycache__", "__phello__", "this", "antigravity",
            "turtledemo", "pydoc_data"}
MIN_WORDS = 4  # "Return self." says nothing about its module
C_OWNERS = {"os": "posix"}  # public module -> the C module its members say they come from
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def source_docstrings(root: Path) -> list[tuple[str, str]]:
    """(label, docstring) of every documented module, class and function of the .py files
    under `root` (the stdlib), the label the file's first path part."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if LEFT_OUT & {p.removesuffix(".py") for p in rel.parts} or rel.parts[0].startswith("config-"):
            continue
        label = rel.parts[0].removesuffix(".py")
        found += [(label, doc) for doc in file_docstrings(path)]
    return found


def file_docstrings(path: Path) -> list[str]:
    """The docstrings of every documented module, class and function of one .py file, in
    ast.walk's order; none where it does not parse. Parsed, never imported (benchmarks/corpora.py
    reads site-packages with it)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):  # lib2to3's Python 2 fixtures; a null byte
        return []
    return [doc for node in ast.walk(tree) if isinstance(node, DOCUMENTED) if (doc := ast.get_docstring(node))]


def c_docstrings() -> list[tuple[str, str]]:
    """(label, docstring) of the public modules' members written in C (builtins, os.stat,
    math.sqrt and their classes' methods), each under the module it belongs to."""
    found, seen = [], set()
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in LEFT_OUT or name in ("idlelib", "tkinter", "turtle"):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated modules (cgi, imp) warn when imported
                module = importlib.import_module(name)
        except Exception:  # a module this build lacks (_tkinter, nis)
            continue
        for key, obj in sorted(vars(module).items()):
            owner = str(getattr(obj, "__module__", "") or "").lstrip("_")
            if key.startswith("_") or owner not in (name, C_OWNERS.get(name)) or id(obj) in seen:
                continue
            is_c_class = inspect.isclass(obj) and written_in_c(obj)
            if not (inspect.isbuiltin(obj) or is_c_class):
                continue
            members = [obj] + ([m for k, m in sorted(vars(obj).items()) if not k.startswith("_") and callable(m)]
                               if is_c_class else [])
            seen.update(id(m) for m in members)
            found += [(name, m.__doc__) for m in members if isinstance(m.__doc__, str)]
    return found


def written_in_c(cls: type) -> bool:
    """A class whose methods are C's (decimal.Decimal from _decimal), none of them Python's."""
    members = list(vars(cls).values())
    return any(inspect.ismethoddescriptor(m) for m in members) and not any(inspect.isfunction(m) for m in members)


def build(out: Path, min_docs: int) -> dict[str, int]:
    """Write out/<label>/<n>.txt -> documents per label. A docstring of fewer than MIN_WORDS
    words is left out, and so is a label with fewer than `min_docs` documents."""
    root = Path(sysconfig.get_paths()["stdlib"])
    docs = [(label, inspect.cleandoc(doc)) for label, doc in source_docstrings(root) + c_docstrings()]
    docs = [(label, doc) for label, doc in docs if len(doc.split()) >= MIN_WORDS]
    counts = collections.Counter(label for label, _ in docs)
    kept = {label for label, n in counts.items() if n >= min_docs}
    if out.exists():
        shutil.rmtree(out)
    written: collections.Counter[str] = collections.Counter()
    for label, doc in docs:
        if label in kept:
            folder = out / label
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{written[label]:05d}.txt").write_text(doc + "\n", encoding="utf-8")
            written[label] += 1
    labels_of = collections.defaultdict(set)
    for label, doc in docs:
        if label in kept:
            labels_of[doc].add(label)
    shared = sum(1 for labels in labels_of.values() if len(labels) > 1)
    log.info("Python %s: %d documents in %d classes (%d to %d each) in %s; %d texts carry two labels or more",
             sys.version.split()[0], sum(written.values()), len(written), min(written.values()),
             max(written.values()), out, shared)
    return dict(written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the folder to write (replaced)")
    parser.add_argument("--min-docs", type=int, default=15, help="leave out labels with fewer documents")
    args = parser.parse_args()
    build(args.out, args.min_docs)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
