"""The benchmark corpora in one place, each written as a folder of class folders that ingest reads.

    .venv/bin/python benchmarks/corpora.py packages /tmp/packages-corpus
    .venv/bin/python benchmarks/corpora.py fortunes /tmp/fortunes-corpus --fraction 0.3

bbc: ../shared/data/bbc (relative to the repository; 5 balanced classes), README* left out.
fortunes: Debian's fortune files (`apt-get install -y fortunes fortunes-min`), one class per file
of /usr/share/games/fortunes, texts split on lines holding only `%` (42 classes, 10 to 1 250 each).
stdlib: the standard library's docstrings by module (benchmarks/stdlib_corpus.py: 116 classes).
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
benchmarks build it where they need it (many_class.py, recipes.py).
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import inspect
import logging
import math
import re
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from stdlib_corpus import LEFT_OUT, MIN_WORDS, file_docstrings  # noqa: E402
from stdlib_corpus import build as stdlib_build  # noqa: E402

log = logging.getLogger("corpora")
CORPORA = ("bbc", "fortunes", "stdlib", "packages")
BBC = ROOT.parent / "shared" / "data" / "bbc"
FORTUNES = Path("/usr/share/games/fortunes")
MIN_KEEP = 10  # a subsampled class keeps this many documents (ingest.min_per_class is 5)
MIN_DOCS = 15  # stdlib and packages: a smaller class is left out
PACKAGE_CAP = 150  # packages: torch alone has ~20 000 docstrings; 150 keeps ~180 packages at ~18 000 documents
# vendored copies are other projects' docstrings under pip's or setuptools' label
PACKAGE_LEFT_OUT = LEFT_OUT | {"_vendor", "vendor", "_vendored", "vendored", "_vendored_packages"}


def fortunes_corpus(out: Path, min_texts: int) -> Path:
    """/usr/share/games/fortunes -> out/<class>/<n>.txt; a file with fewer than min_texts
    texts (pratchett: 2) is left out, as ingest.min_per_class would stop on it."""
    if not FORTUNES.is_dir():
        raise SystemExit("no /usr/share/games/fortunes: apt-get install -y fortunes fortunes-min")
    for path in sorted(FORTUNES.iterdir()):
        if path.suffix in (".dat", ".u8") or path.is_symlink() or not path.is_file():
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        texts = [t.strip() for t in re.split(r"^%$", raw, flags=re.M) if t.strip()]
        if len(texts) < min_texts:
            log.warning("left out %s: %d texts", path.name, len(texts))
            continue
        folder = out / path.name
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(texts):
            (folder / f"{i:05d}.txt").write_text(text + "\n", encoding="utf-8")
    return out


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
        if not BBC.is_dir():
            raise SystemExit(f"no BBC corpus at {BBC} (../shared/data/bbc beside the repository)")
        shutil.copytree(BBC, tmp, ignore=shutil.ignore_patterns("README*"))
    elif corpus == "fortunes":
        fortunes_corpus(tmp, 5)
    elif corpus == "stdlib":
        stdlib_build(tmp, min_docs=MIN_DOCS)
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
    parser.add_argument("--min-docs", type=int, default=MIN_DOCS, help="packages: leave out smaller classes")
    args = parser.parse_args()
    out = args.out.resolve()
    if args.corpus == "packages":
        packages_corpus(out, args.min_docs, args.cap, max_files=args.max_files)
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
