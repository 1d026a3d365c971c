"""The benchmark corpora in one place, each written as a folder of class folders that ingest reads.

    .venv/bin/python benchmarks/corpora.py packages /tmp/packages-corpus
    .venv/bin/python benchmarks/corpora.py fortunes /tmp/fortunes-corpus --fraction 0.3
    .venv/bin/python benchmarks/corpora.py stdlib /tmp/stdlib-corpus

bbc: ../shared/data/bbc (relative to the repository; 5 balanced classes), README* left out; the
benchmarks read it here (BBC, bbc_classes, sample_texts), cut it here (bbc_rare) or copy it whole.
fortunes: Debian's fortune files (`apt-get install -y fortunes fortunes-min`), one class per file
of /usr/share/games/fortunes, texts split on lines holding only `%` (42 classes, 10 to 1 250 each).
stdlib: the standard library's docstrings (modules, classes, functions, methods), each labelled by
its top-level module or package. What users bring looks like this, not like BBC: many classes
(116 with Python 3.11 at --min-docs 15) from a few dozen documents to several hundred, and
near-duplicate siblings with different labels: posixpath / ntpath, _pyio / io, _pydecimal /
decimal, asyncio / concurrent (Future), os / shutil, the same docstring in two modules. Sources
are parsed (ast), never imported, except the public modules whose members are written in C
(os.stat, math.sqrt, builtins): those are imported to read their __doc__. The test suites,
site-packages and modules that act when imported (this, antigravity) are left out.
packages: the docstrings of the third-party packages installed beside the Python that runs this
(its site-packages: run it with the project's venv), each labelled by its top-level package
(torch, transformers, sklearn, pandas, mlflow, dvc, ...), parsed with ast, never imported.
A package's files are read in the order of their paths' hashes (a spread over its modules, not
its first few; deterministic) until --cap (150) distinct docstrings of MIN_WORDS words are
found, the --cap whose texts hash lowest are kept, and a package with fewer than --min-docs (15)
is left out (--max-files N: each package's first N files only, a fast slice): many imbalanced classes (182 with this project's venv, 15 to 150 each, ~18 500
documents), look-alike siblings (dvc / dvc_data / dvc_objects, torch / functorch / torchgen,
boto3 / botocore / aiobotocore) and the same docstring under two labels (74 texts: ruamel /
yaml, click / typer, cfnlint / jsonschema copy each other).
--fraction F keeps each class's first ceil(F n) documents (at least MIN_KEEP): the imbalance
stays, the cost falls. The same files give the same corpus (sorted walks). Nothing is committed:
benchmarks build it where they need it (recipes/many_class.py, recipes/recipes.py).
"""
from __future__ import annotations

import argparse
import ast
import collections
import hashlib
import importlib
import inspect
import logging
import math
import re
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("corpora")
CORPORA = ("bbc", "fortunes", "stdlib", "packages")
BBC = ROOT.parent / "shared" / "data" / "bbc"
RARE = ("tech", "entertainment")  # the BBC classes the imbalance benchmarks cut
FORTUNES = Path("/usr/share/games/fortunes")
MIN_KEEP = 10  # a subsampled class keeps this many documents (ingest.min_per_class is 5)
MIN_DOCS = 15  # stdlib and packages: a smaller class is left out
MIN_WORDS = 4  # stdlib and packages: "Return self." says nothing about its module
LEFT_OUT = {"site-packages", "test", "tests", "idle_test", "__pycache__", "__phello__", "this", "antigravity",
            "turtledemo", "pydoc_data"}
C_OWNERS = {"os": "posix"}  # public module -> the C module its members say they come from
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
PACKAGE_CAP = 150  # packages: torch alone has ~20 000 docstrings; 150 keeps ~180 packages at ~18 000 documents
# vendored copies are other projects' docstrings under pip's or setuptools' label
PACKAGE_LEFT_OUT = LEFT_OUT | {"_vendor", "vendor", "_vendored", "vendored", "_vendored_packages"}


def bbc_classes(source: Path = BBC) -> dict[str, list[Path]]:
    """BBC's class folders -> their articles in file-name order (README.TXT is not one)."""
    if not source.is_dir():
        raise SystemExit(f"no BBC corpus at {source} (../shared/data/bbc beside the repository)")
    return {p.name: sorted(p.glob("*.txt")) for p in sorted(source.iterdir()) if p.is_dir()}


def sample_texts(n: int | None = None, source: Path = BBC) -> list[str]:
    """n texts spread over the corpus (every k-th article in file order; all for None): the same
    for every contender of a run."""
    files = [f for paths in bbc_classes(source).values() for f in paths]
    step = max(1, len(files) // n) if n else 1
    return [f.read_text(encoding="utf-8", errors="replace") for f in files[::step][:n]]


def bbc_rare(dst: Path, keep: int | None) -> Path:
    """BBC copied into dst (ingest refuses links out of its folder), the RARE classes cut to their
    first `keep` articles (None: as it is)."""
    for label, files in bbc_classes().items():
        (dst / label).mkdir(parents=True)
        for f in files[:keep] if label in RARE else files:
            shutil.copy(f, dst / label / f.name)
    return dst


def fortune_texts() -> dict[str, list[str]]:
    """Each file of /usr/share/games/fortunes -> its texts (split on lines holding only `%`)."""
    if not FORTUNES.is_dir():
        raise SystemExit("no /usr/share/games/fortunes: apt-get install -y fortunes fortunes-min")
    out = {}
    for path in sorted(FORTUNES.iterdir()):
        if path.suffix in (".dat", ".u8") or path.is_symlink() or not path.is_file():
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        out[path.name] = [t.strip() for t in re.split(r"^%$", raw, flags=re.M) if t.strip()]
    return out


def fortunes_corpus(out: Path, min_texts: int) -> Path:
    """/usr/share/games/fortunes -> out/<class>/<n>.txt; a file with fewer than min_texts
    texts (pratchett: 2) is left out, as ingest.min_per_class would stop on it."""
    for name, texts in fortune_texts().items():
        if len(texts) < min_texts:
            log.warning("left out %s: %d texts", name, len(texts))
            continue
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (folder / f"{i:05d}.txt").write_text(text + "\n", encoding="utf-8")
    return out


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
    ast.walk's order; none where it does not parse. Parsed, never imported (packages_corpus
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


def stdlib_corpus(out: Path, min_docs: int = MIN_DOCS) -> dict[str, int]:
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


def site_packages() -> Path:
    """The running Python's site-packages (the venv's, when the venv's Python runs this)."""
    return Path(sysconfig.get_paths()["purelib"])


def package_label(rel: Path) -> str | None:
    """A .py file's class: its top-level package or module; None for what is not a third-party
    package's own source (editable-install finders, this project, tests, vendored copies)."""
    label = rel.parts[0].removesuffix(".py")
    if (label.startswith("__") or label == "textclf" or "." in label or "-" in label
            or PACKAGE_LEFT_OUT & {p.removesuffix(".py") for p in rel.parts}):
        return None
    return label


def package_files(site: Path) -> dict[str, list[Path]]:
    """label -> its .py files under `site`, each package's in the order of their paths' hashes
    (a spread over its modules that the same files always give)."""
    files = collections.defaultdict(list)
    for path in sorted(site.rglob("*.py")):
        rel = path.relative_to(site)
        if (label := package_label(rel)) is not None:
            files[label].append(path)
    digest = lambda path: hashlib.sha256(path.relative_to(site).as_posix().encode()).hexdigest()  # noqa: E731
    return {label: sorted(paths, key=digest) for label, paths in sorted(files.items())}


def package_docs(paths: list[Path], cap: int, max_files: int = 0) -> dict[str, str]:
    """hash -> docstring of one package's files, read in order until `cap` distinct docstrings
    of MIN_WORDS words or more are found (torch's thousands of files are not all parsed), or
    after max_files files (0: no limit; a fast slice for tests)."""
    docs: dict[str, str] = {}
    for path in paths[:max_files or None]:
        for doc in map(inspect.cleandoc, file_docstrings(path)):
            if len(doc.split()) >= MIN_WORDS:
                docs.setdefault(hashlib.sha256(doc.encode()).hexdigest(), doc)
        if len(docs) >= cap:
            break
    return docs


def packages_corpus(out: Path, min_docs: int = MIN_DOCS, cap: int = PACKAGE_CAP, site: Path | None = None,
                    max_files: int = 0) -> dict[str, int]:
    """Write out/<package>/<n>.txt -> documents per package: the `cap` distinct docstrings of
    package_docs whose texts hash lowest, in that order; a package with fewer than `min_docs`
    is left out."""
    site = site or site_packages()
    if out.exists():
        shutil.rmtree(out)
    written = {}
    for label, paths in package_files(site).items():
        docs = package_docs(paths, cap, max_files)
        if len(docs) < min_docs:
            continue
        folder = out / label
        folder.mkdir(parents=True)
        for i, key in enumerate(sorted(docs)[:cap]):
            (folder / f"{i:05d}.txt").write_text(docs[key] + "\n", encoding="utf-8")
        written[label] = min(len(docs), cap)
    if not written:
        raise SystemExit(f"no package in {site} has {min_docs} docstrings")
    log.info("packages of %s: %d documents in %d classes (%d to %d each) in %s", site, sum(written.values()),
             len(written), min(written.values()), max(written.values()), out)
    return written


def build(corpus: str, out: Path) -> Path:
    """The whole corpus -> out (written through a temporary folder, so a stopped build leaves none)."""
    tmp = out.with_name(out.name + ".building")
    if tmp.exists():
        shutil.rmtree(tmp)
    if corpus == "bbc":
        bbc_classes()  # there, or one line saying where it should be
        shutil.copytree(BBC, tmp, ignore=shutil.ignore_patterns("README*"))
    elif corpus == "fortunes":
        fortunes_corpus(tmp, 5)
    elif corpus == "stdlib":
        stdlib_corpus(tmp)
    elif corpus == "packages":
        packages_corpus(tmp)
    else:
        raise SystemExit(f"no corpus {corpus!r}: one of {', '.join(CORPORA)}")
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


# A subsample keeps every k-th class (sorted by name) where the whole corpus has more classes than
# a benchmark can afford at MIN_KEEP documents each: packages' 182 -> 61, sizes 15-150 kept
CLASS_STRIDE = {"packages": 3}


def subsample(full: Path, cut: Path, fraction: float, stride: int = 1) -> Path:
    """Each `stride`-th class folder of `full` cut to its first ceil(fraction n) files (at
    least MIN_KEEP) -> cut."""
    for folder in sorted(p for p in full.iterdir() if p.is_dir())[::stride]:
        files = sorted(folder.iterdir())
        (cut / folder.name).mkdir(parents=True)
        for f in files[:max(math.ceil(fraction * len(files)), min(len(files), MIN_KEEP))]:
            shutil.copy(f, cut / folder.name / f.name)
    return cut


def source(corpus: str, work: Path, fraction: float) -> Path:
    """The corpus as a folder of class folders in work/full (built once), or its subsample
    work/cut<fraction> when fraction < 1 (every CLASS_STRIDE-th class of a corpus it names)."""
    full = work / "full"
    if not full.is_dir():
        build(corpus, full)
    if fraction >= 1:
        return full
    stride = CLASS_STRIDE.get(corpus, 1)
    cut = work / f"cut{fraction}" if stride == 1 else work / f"cut{fraction}-every{stride}"
    return cut if cut.is_dir() else subsample(full, cut, fraction, stride)


def counts(folder: Path) -> dict[str, int]:
    """Documents per class folder."""
    return {p.name: sum(1 for _ in p.iterdir()) for p in sorted(folder.iterdir()) if p.is_dir()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=CORPORA)
    parser.add_argument("out", type=Path, help="the folder to write (replaced)")
    parser.add_argument("--fraction", type=float, default=1.0, help="of each class's documents (at least MIN_KEEP)")
    parser.add_argument("--max-files", type=int, default=0, help="packages: each package's first N files only")
    parser.add_argument("--cap", type=int, default=PACKAGE_CAP, help="packages: documents a class keeps at most")
    parser.add_argument("--min-docs", type=int, default=MIN_DOCS, help="stdlib, packages: leave out smaller classes")
    args = parser.parse_args()
    out = args.out.resolve()
    if args.corpus == "packages":
        packages_corpus(out, args.min_docs, args.cap, max_files=args.max_files)
    elif args.corpus == "stdlib":
        stdlib_corpus(out, args.min_docs)
    else:
        build(args.corpus, out)
    if args.fraction < 1:
        cut = out.with_name(f"{out.name}.cut{args.fraction}")
        if cut.exists():
            shutil.rmtree(cut)
        out = subsample(out, cut, args.fraction)
    n = counts(out)
    log.info("%s: %d documents in %d classes (%d to %d each) in %s", args.corpus, sum(n.values()), len(n),
             min(n.values()), max(n.values()), out)
    log.info("sizes: %s", ", ".join(f"{k} {v}" for k, v in sorted(n.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
