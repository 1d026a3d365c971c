"""Start-up cost and what each stage depends on.

- ingest and split never import torch, transformers or MLflow; tokenize and baseline never
  import torch or transformers (checked in a fresh interpreter, through sys.modules).
- dvc.yaml lists, for each stage, exactly the textclf modules its script can import (read
  from the source, function-level imports included): a change to report-only code reruns
  only report, and a module a stage needs cannot be missing from its deps.
"""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO

STAGES = ("ingest", "tokenize", "split", "baseline", "features", "train", "export", "evaluate", "labels", "report")
HEAVY = ("torch", "transformers", "mlflow", "sklearn", "matplotlib", "accelerate")
NEVER = {"ingest": {"torch", "transformers", "mlflow"}, "split": {"torch", "transformers", "mlflow"},
         "tokenize": {"torch", "transformers", "mlflow"}, "baseline": {"torch", "transformers", "mlflow"},
         "labels": {"torch", "transformers", "mlflow"}, "report": {"torch", "transformers"}}


def module_file(module: str) -> Path:
    path = REPO / "src" / Path(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def textclf_imports(path: Path) -> set[str]:
    """The textclf modules a file imports anywhere in it (top level or inside functions),
    with the packages Python imports on the way (textclf, textclf.data, ...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "textclf":
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names  # from textclf.report import figures
                      if module_file(f"{node.module}.{a.name}").is_file()}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "textclf"}
    return {".".join(m.split(".")[:i]) for m in found for i in range(1, m.count(".") + 2)}


def needed_sources(stage: str) -> set[str]:
    seen, todo = set(), list(textclf_imports(REPO / "stages" / f"{stage}.py"))
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += textclf_imports(module_file(module))
    return {module_file(m).relative_to(REPO).as_posix() for m in seen}


def as_deps(sources: set[str]) -> list[str]:
    """Module files -> dvc.yaml deps: a package folder where the stage needs every module in
    it (the layer contracts keep that exact), its files otherwise."""
    deps, covered = [], set()
    for folder in sorted({str(Path(s).parent) for s in sources} - {"src/textclf"}):
        files = {p.relative_to(REPO).as_posix() for p in (REPO / folder).glob("*.py")}
        if files <= sources:
            deps.append(folder)
            covered |= files
    return sorted(deps + sorted(sources - covered))


def expand(deps: list[str]) -> set[str]:
    out = set()
    for dep in deps:
        path = REPO / dep
        out |= {p.relative_to(REPO).as_posix() for p in path.glob("*.py")} if path.is_dir() else {dep}
    return out


@pytest.mark.parametrize("stage", STAGES)
def test_dvc_yaml_deps_are_the_modules_the_stage_imports(stage):
    deps = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]["deps"]
    listed = [d for d in deps if d.startswith("src/")]
    expected = needed_sources(stage)
    assert expand(listed) == expected, (f"dvc.yaml stage {stage}: list exactly these under deps:\n"
                                        + "\n".join(f"      - {d}" for d in as_deps(expected)))
    assert f"stages/{stage}.py" in deps


@pytest.mark.parametrize("stage", sorted(NEVER))
def test_light_stages_do_not_import_heavy_libraries(stage):
    code = (f"import sys, json; import stages.{stage}; "
            f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert not set(json.loads(out.stdout)) & NEVER[stage], f"stages.{stage} imports {out.stdout.strip()}"
