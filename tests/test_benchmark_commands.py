"""Every benchmark command the README, docs/ and the benchmark folders' READMEs name runs from
the path it names (issue 62): each script answers --help from a fresh interpreter without
PYTHONPATH, as a reader runs it, and only the shared modules sit directly in benchmarks/. The
measurements themselves never run here."""
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from conftest import REPO

COMMAND = re.compile(r"\b(?:python3?|bash)\s+(benchmarks/[\w/]+\.(?:py|sh))\b")
LINK = re.compile(r"\]\(([^)\s:]*benchmarks[^)\s]*)\)")  # a relative link into the benchmark pages or folders
SHARED = {"corpora.py", "timing.py"}


def pages() -> list:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "benchmarks").rglob("*.md"))]


def named_scripts() -> dict[str, list[str]]:
    """benchmarks/… script -> the pages whose commands name it."""
    found: dict[str, list[str]] = {}
    for page in pages():
        for script in COMMAND.findall(page.read_text()):
            found.setdefault(script, []).append(page.relative_to(REPO).as_posix())
    return found


def help_of(script: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the scripts find their modules themselves
    return subprocess.run([sys.executable, script, "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_every_benchmark_command_in_the_docs_answers_help_from_its_path():
    scripts = named_scripts()
    assert len(scripts) >= 30, sorted(scripts)  # the pages name nearly every benchmark
    missing = {s: where for s, where in scripts.items() if not (REPO / s).is_file()}
    assert not missing, f"named but not there: {missing}"
    python = sorted(s for s in scripts if s.endswith(".py"))
    with ThreadPoolExecutor(4) as pool:  # the scripts import little before parsing: ~1 s each
        answers = dict(zip(python, pool.map(help_of, python)))
    failed = {s: p.stderr[-500:] for s, p in answers.items() if p.returncode != 0 or "usage:" not in p.stdout}
    assert not failed, failed
    for script in (s for s in scripts if s.endswith(".sh")):  # gpu.sh needs a GPU, bbc_accuracy.sh BBC: parsed only
        proc = subprocess.run(["bash", "-n", script], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


def test_only_the_shared_modules_sit_directly_in_benchmarks():
    assert {p.name for p in (REPO / "benchmarks").glob("*.py")} == SHARED


def test_every_benchmark_folder_has_a_readme_naming_each_of_its_scripts():
    for folder in (p for p in (REPO / "benchmarks").iterdir() if p.is_dir() and p.name[0] not in "._"):
        readme = (folder / "README.md").read_text()
        for script in folder.glob("*.[ps][yh]"):
            assert script.name in readme, f"{folder.name}/README.md does not name {script.name}"


def anchors(page) -> set[str]:
    """The heading anchors of a Markdown page, as GitHub makes them (code blocks left out)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_link_into_the_benchmark_pages_resolves_anchors_too():
    """docs/benchmarks.md became an index of a page per area (issue 62): a link to a section
    that moved names its new page."""
    broken = []
    for page in pages():
        for target in LINK.findall(page.read_text()):
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve()
            if not dest.exists() or (anchor and anchor not in anchors(dest)):
                broken.append(f"{page.relative_to(REPO)}: {target}")
    assert not broken, broken
