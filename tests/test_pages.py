"""Pages of docs/ followed as written (docs/testing.md lists which test keeps which page true):
the commands are taken from the page itself, so a page cannot drift from what runs."""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import optuna
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from reaper import reaper
from conftest import GIT_ENV, REPO, copy_repo, copy_reproduced, dvc, free_port, git, write_params
from test_remote import UP_TO_DATE, ran
from test_data_versions import NEW_DOCS
from test_sweep import sweep_repo


VENV_BIN = Path(sys.executable).parent
# a reader's shell before `source .venv/bin/activate`: no venv on PATH, so a page that needs one
# fails here as it does for them (issue 60, defect 5: the tests put the venv first, and hid it)
READER_PATH = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if Path(d) != VENV_BIN)
# commands that start another program by name from PATH: dvc a stage's `python -m stages.…`,
# mlflow its server (uvicorn, gunicorn), a queue worker dvc
BY_NAME = re.compile(r"(^|[;&|]\s*|\bdo\s+|=\S+\s+)(\S*/)?(dvc (repro|exp run|queue start)|mlflow (ui|server|models serve)"
                     r"|make \w+)\b")


def page_text(page: str) -> str:
    return (REPO / page if page == "README.md" else REPO / "docs" / page).read_text()


def fenced(page: str) -> list[str]:
    """The ```bash blocks of a docs page (or the README), in order, each as one string (line
    continuations kept)."""
    return re.findall(r"```bash\n(.*?)```", page_text(page), re.DOTALL)


# A block's tier is said on the page, in an HTML comment right before its fence (a reader of the
# rendered page sees nothing): none (the default tier runs it), `<!-- slow: why -->` (the slow
# tier), or `<!-- not run by the tests: why -->` (it cannot run here: a GPU, a second machine, …).
NOTE = re.compile(r"(?:<!--\s*((?:(?!-->).)*?)\s*-->\n[ \t]*)?```bash\n(.*?)```", re.DOTALL)
NOT_RUN = "not run by the tests:"


def tiers(page: str) -> list[tuple[str, str]]:
    """(tier, block) for each ```bash block of a page: tier is "default", "slow", or the reason
    it is not run."""
    def tier(note: str) -> str:
        if note.startswith(NOT_RUN):
            return note.removeprefix(NOT_RUN).strip()
        return "slow" if note == "slow" or note.startswith("slow:") else "default"
    return [(tier(note or ""), block) for note, block in NOTE.findall(page_text(page))]


def with_venv(repo: Path) -> Path:
    """`repo/.venv`: this interpreter's venv, for a page's `source .venv/bin/activate`."""
    if not (repo / ".venv").exists():
        os.symlink(VENV_BIN.parent, repo / ".venv")
    return repo


STEP = "::step::"  # what the script prints before each line's output, and after it its exit status


@dataclass
class Followed:
    """What each line of the blocks printed (stdout and stderr), by the line as the page has it."""
    steps: list[tuple[str, str, int]] = field(default_factory=list)  # (line, output, exit status)
    servers: list[int] = field(default_factory=list)  # process groups of the lines sent to the background

    def out(self, part: str) -> str:
        """The output of the first line that contains `part`."""
        return next(out for line, out, _ in self.steps if part in line)

    def rc(self, part: str) -> int:
        return next(rc for line, _, rc in self.steps if part in line)


def lines(block: str) -> list[str]:
    """A block's command lines, a backslash-continued line as one, indentation removed."""
    text = "\n".join(line.strip() for line in block.strip().splitlines())
    return [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def script(blocks: list[str], edits: dict[str, str], fails: tuple[str, ...], background: str | None) -> str:
    """One bash script of the blocks, state kept from line to line as in a reader's shell. Each
    line is announced, then its exit status; the first failure ends it (but for `fails`). A
    `background` line starts in a process group of its own, its output to server.log."""
    out = ["exec 2>&1"]
    for line in (line for block in blocks for line in lines(block)):
        run = line
        for old, new in edits.items():
            run = run.replace(old, new)
        if run.startswith("#"):
            continue
        out.append(f"echo {shlex.quote(STEP + line)}")
        if background and background in line:
            # a group on lines of its own, so that a comment ends with its line and not the `&`
            out += ["set -m", f"{{ {run}\n}} > server.log 2>&1 < /dev/null &", f'echo "{STEP}pid $!"', "set +m"]
            continue
        allowed = any(part in line for part in fails)
        out += [run, f'rc=$?; echo "{STEP}rc $rc"', "true" if allowed else '[ "$rc" = 0 ] || exit "$rc"']
    return "\n".join(out)


def follow(repo: Path, blocks: list[str], env: dict | None = None, edits: dict[str, str] | None = None,
           fails: tuple[str, ...] = (), background: str | None = None) -> Followed:
    """Blocks of a page run as a reader runs them, in order, in one shell: bash in `repo`, the
    venv not on PATH, offline, MLflow's store the one in `repo` unless the page says otherwise.
    `edits` fill what the page leaves to the reader (a file name, a free port). Every line must
    succeed but those containing one of `fails`."""
    base = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.run(["bash", "-c", script(blocks, edits or {}, fails, background)], cwd=with_venv(repo),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1500,
                          env={**base, **GIT_ENV, "PATH": READER_PATH, "HF_HUB_OFFLINE": "1", **(env or {})})
    done = Followed()
    for chunk in proc.stdout.split(STEP)[1:]:
        head, _, rest = chunk.partition("\n")
        if head.startswith("rc "):
            line, out, _ = done.steps.pop()
            done.steps.append((line, out, int(head[3:])))
        elif head.startswith("pid "):
            done.servers.append(int(head[4:]))
        else:
            done.steps.append((head, rest, -1))
    failed = [(line, out[-3000:]) for line, out, rc in done.steps if rc != 0 and not any(p in line for p in fails)
              and not (background and background in line)]
    assert proc.returncode == 0 and not failed, failed or proc.stdout[-3000:]
    return done


@contextlib.contextmanager
def serving(followed: Followed, url: str, seconds: float = 120):
    """The server a followed block left in the background, until it answers `url`; stopped
    (its process group) when the block ends, however it ends (tests/reaper.py)."""
    [pgid] = followed.servers
    stop = reaper().group(pgid)
    try:
        deadline = time.monotonic() + seconds
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, f"{url} silent for {seconds} s"
                time.sleep(0.5)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):  # raised once the group is gone
            os.killpg(pgid, signal.SIGTERM)
            for _ in range(60):
                time.sleep(0.5)
                os.killpg(pgid, 0)
            os.killpg(pgid, signal.SIGKILL)  # a server that did not stop in 30 s
        reaper().done(stop)


PAGES = ["README.md", *sorted(p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES)
def test_a_page_activates_the_venv_before_a_command_that_starts_python_by_name(page):
    """Issue 60, defect 5: `.venv/bin/dvc exp run …` without the venv active runs each stage's
    `python -m stages.…` with whatever python is on PATH (ModuleNotFoundError: mlflow). A block
    that runs such a command activates the venv first (`make` targets put it on PATH themselves)."""
    for block in fenced(page):
        active = False
        for line in block.splitlines():
            active = active or "source .venv/bin/activate" in line
            found = BY_NAME.search(line.split("  #")[0].strip())
            if found and not found.group(3).startswith("make"):
                assert active and not found.group(2), f"{page}: `{line.strip()}` needs `source .venv/bin/activate` first"


def blocks_of(page: str, tier: str) -> list[str]:
    return [block for found, block in tiers(page) if found == tier]


# The test that follows each page's blocks of each tier (docs/testing.md lists the same).
RUN_BY = {
    ("README.md", "default"): "test_readme_serves_and_predicts_as_written",
    ("README.md", "slow"): "test_the_experiment_and_sweep_pages_as_written",
    ("calibration.md", "slow"): "test_the_predict_pages_as_written",
    ("data_versions.md", "slow"): "test_data_versions_as_written",
    ("experiments.md", "slow"): "test_the_experiment_and_sweep_pages_as_written",
    ("mistakes.md", "slow"): "test_mistakes_step_1_as_written",
    ("mlflow.md", "slow"): "test_the_predict_pages_as_written",
    ("recovery.md", "default"): "test_recovery_lists_the_running_runs_and_ends_one_as_written",
    ("sweeps.md", "slow"): "test_the_experiment_and_sweep_pages_as_written",
    ("table_scoring.md", "slow"): "test_the_predict_pages_as_written",
    ("team_setup.md", "default"): "test_team_setup_a_teammate_pulls_and_nothing_runs_as_written",
}
# a repository path a block names (a benchmark, a script): it exists, run or not
NAMED_PATH = re.compile(r"(?<![\w/.])((?:benchmarks|scripts|tests)/[\w/.-]+\.(?:py|sh))")


@pytest.mark.parametrize("page", PAGES)
def test_every_command_block_is_run_by_a_test_or_says_why_not(page):
    """Issue 60: a page's ```bash blocks are the tests' own commands, so a page cannot change
    without its test: each block is followed by the test RUN_BY names for its page and tier
    (slow where the page says so), or says on the page why not. A shell block fenced under
    another name would escape; the scripts a block names exist."""
    assert not re.search(r"^[ \t]*```(sh|shell|console|zsh)\b", page_text(page), re.MULTILINE)
    marked = tiers(page)
    assert len(marked) == len(fenced(page)), "an HTML comment before a fence must end right before it"
    for tier, block in marked:
        if tier in ("default", "slow"):
            assert (page, tier) in RUN_BY, f"{page}: no test runs this block ({tier} tier): {block[:200]}"
        else:
            assert len(tier) > 10, f"{page}: say why a block is not run: {block[:200]}"
        for path in NAMED_PATH.findall(block):
            assert (REPO / path).is_file(), f"{page} names {path}"
    for (named, tier), test in RUN_BY.items():
        if named == page:
            assert tier in {t for t, _ in marked}, f"{page} has no {tier} block for {test} to run"
            slow = any(m.name == "slow" for m in getattr(globals()[test], "pytestmark", []))
            assert slow == (tier == "slow"), test
            assert f"`test_pages.py::{test}`" in (REPO / "docs" / "testing.md").read_text(), test


def test_a_block_runs_line_by_line_with_its_state_and_stops_at_the_first_failure(tmp_path):
    """The runner itself: a variable and `cd` carry to the next line, every line's output and
    status are its own, a line allowed to fail goes on, the first other failure ends the run."""
    block = "X=1 && mkdir d\ncd d && echo in $X\nfalse  # allowed\npwd\n"
    done = follow(tmp_path, [block], fails=("allowed",))
    assert [(line, rc) for line, _, rc in done.steps] == \
        [("X=1 && mkdir d", 0), ("cd d && echo in $X", 0), ("false  # allowed", 1), ("pwd", 0)]
    assert done.out("echo in") == "in 1\n" and done.out("pwd").strip() == str(tmp_path / "d")
    with pytest.raises(AssertionError, match="false"):
        follow(tmp_path, ["false\ntouch never\n"])
    assert not (tmp_path / "never").exists()


def test_the_venv_activation_a_page_gives_puts_the_stages_python_on_path(tmp_path):
    """What each page's first line does, in a reader's shell: afterwards `python` imports the
    stages' dependencies, and `dvc` is the venv's."""
    done = follow(tmp_path, ["source .venv/bin/activate\npython -c 'import mlflow, torch'\ncommand -v dvc"])
    assert Path(done.out("command -v dvc").strip()).parent == VENV_BIN


def test_a_command_that_queues_experiments_finds_dvc_without_the_venv_on_path(monkeypatch):
    """`.venv/bin/python -m textclf.sweep` (or multiseed) from a shell without the venv: the
    dvc it calls, and the stage python dvc calls, are the venv's."""
    from textclf.tracking.dvc_exps import dvc as run_dvc
    monkeypatch.setenv("PATH", READER_PATH)
    assert run_dvc("version")


TEXTS = ["Shares fell after the profit warning.", "The striker scored twice in the final.",
         "A new phone with a faster chip goes on sale.", "Parliament votes on the budget tonight.",
         "The film festival opens with a quiet drama."]


def invoke(url: str, texts: list[str]) -> list[dict]:
    body = json.dumps({"dataframe_split": {"columns": ["text"], "data": [[t] for t in texts]}}).encode()
    request = urllib.request.Request(f"{url}/invocations", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())["predictions"]


def test_readme_serves_and_predicts_as_written(reproduced, tmp_path):
    """The README's "Serve and predict" on the demo run: a text file on the exported model, a
    table and the REST server on the registered champion, all with the same answers."""
    repo = copy_reproduced(reproduced, tmp_path / "repo")
    (repo / "article.txt").write_text(TEXTS[0])
    pd.DataFrame({"text": TEXTS}).to_parquet(repo / "tickets.parquet")
    port = free_port()
    done = follow(repo, blocks_of("README.md", "default"), edits={"5001": str(port)}, background="textclf.serve")
    scored = pd.read_parquet(repo / "scored.parquet")
    with serving(done, f"http://127.0.0.1:{port}/ping"):
        served = invoke(f"http://127.0.0.1:{port}", TEXTS)
    assert [a["label"] for a in served] == scored["label"].tolist()
    assert done.out("article.txt").split("\t")[:2] == ["article.txt", scored["label"][0]]


def test_recovery_lists_the_running_runs_and_ends_one_as_written(tmp_path):
    """docs/recovery.md's stale runs, on a store with a RUNNING and a FINISHED run: the listing
    gives the RUNNING one with its host and pid, not the other (`mlflow runs list`, which the
    page gave, shows no status; issue 55), and the second line, given its id, ends it FAILED."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.create_experiment("textclf")
    stale = client.create_run(exp, tags={"textclf.host": "node-a", "textclf.pid": "4242"}).info.run_id
    done = client.create_run(exp).info.run_id
    client.set_terminated(done, "FINISHED")
    followed = follow(tmp_path, blocks_of("recovery.md", "default"), edits={"RUN_ID": stale})
    assert followed.out("search_runs").split() == [stale, "node-a", "4242"]
    assert client.get_run(stale).info.status == "FAILED"


def test_team_setup_a_teammate_pulls_and_nothing_runs_as_written(reproduced, tmp_path):
    """docs/team_setup.md's DVC remote (a shared folder) and its teammate: pushed after the demo
    run was committed, cloned elsewhere, `dvc pull --run-cache`: up to date, `dvc repro` runs
    nothing, and with `models/` deleted restores train from the run-cache."""
    origin, remote = tmp_path / "origin", tmp_path / "remote"
    # the team's MLflow store is the tracking server, which no remote carries: left behind
    shutil.copytree(reproduced[0], origin, symlinks=True, ignore=shutil.ignore_patterns("mlflow.db", "mlruns", "tmp"))
    assert ran(dvc(origin, "repro")) == set()  # the shared repo is as `reproduced` left it
    git(origin, "add", "-A")
    git(origin, "commit", "-qm", "the demo run")  # what the page's "after dvc repro" has done
    add_remote, teammate = blocks_of("team_setup.md", "default")
    follow(origin, [add_remote], edits={"/srv/dvc/textclf": str(remote)})
    # the clone's `make install` is the venv these tests run in: installing one is .ci/run's job
    done = follow(tmp_path, [teammate], edits={"<repo>": str(origin), "make install": f"ln -s {VENV_BIN.parent} .venv"})
    clone = tmp_path / "textclf"
    assert UP_TO_DATE in done.out("dvc status")
    assert ran(dvc(clone, "repro")) == set()
    model = Path("models/model/model.safetensors")
    assert (clone / model).read_bytes() == (origin / model).read_bytes()
    shutil.rmtree(clone / "models")
    out = dvc(clone, "repro")
    assert ran(out) == set() and "Stage 'train' is cached - skipping run, checking out outputs" in out, out
    assert (clone / model).read_bytes() == (origin / model).read_bytes()
    assert git(clone, "status", "--porcelain", "--", ".", ":!.venv") == ""  # models/.gitignore restored too
    assert not (clone / "mlflow.db").exists() and not (clone / "mlruns").exists()


@pytest.mark.slow
def test_mistakes_step_1_as_written(tmp_path):
    """docs/mistakes.md's step 1 fails in train on the random encoder, and leaves params.yaml as
    it was: step 1's failing run used to leave `model.head: pooled` and `model.init: config`
    there, and step 2's `--temp` run copied them and died of the random encoder instead."""
    repo = copy_repo(tmp_path / "repo")
    done = follow(repo, blocks_of("mistakes.md", "slow"), {"MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
                  fails=("dvc exp run",))
    assert done.rc("dvc exp run") != 0
    assert "newly initialised, not loaded from the checkpoint" in done.out("dvc exp run")
    assert git(repo, "status", "--porcelain", "params.yaml") == ""  # step 2 starts from the page's params


def write_inputs(repo: Path) -> None:
    """The files the predict pages leave to the reader: an article, tables of texts."""
    (repo / "article.txt").write_text(TEXTS[0])
    pd.DataFrame({"text": TEXTS}).to_parquet(repo / "in.parquet")
    pd.DataFrame({"doc_id": range(len(TEXTS)), "body": TEXTS}).to_csv(repo / "in.csv", index=False)


@pytest.mark.slow
def test_the_predict_pages_as_written(reproduced, tmp_path):
    """docs/calibration.md's and docs/table_scoring.md's predict commands, then docs/mlflow.md's
    `mlflow models predict` and both `mlflow models serve` on the demo run: the run's logged
    model, the champion, the table and the training folder give each text one label, the same."""
    repo = copy_reproduced(reproduced, tmp_path / "repo")
    write_inputs(repo)
    done = follow(repo, blocks_of("calibration.md", "slow") + blocks_of("table_scoring.md", "slow"))
    labels = pd.read_parquet(repo / "out.parquet")["label"].tolist()
    assert pd.read_parquet(repo / "preds.parquet").columns[0] == "doc_id"  # --id-column keeps only it
    assert pd.read_parquet(repo / "preds.parquet")["label"].tolist() == labels
    assert done.out("models:/textclf@champion article.txt").split("\t")[:2] == ["article.txt", labels[0]]
    assert "models/model was calibrated on" in done.out("--coverage 0.95")  # more than validation guarantees
    for block in blocks_of("mlflow.md", "slow"):
        port = free_port()
        served = follow(repo, [block], edits={"5001": str(port)}, background="mlflow models serve")
        with serving(served, f"http://127.0.0.1:{port}/ping"):
            assert [a["label"] for a in invoke(f"http://127.0.0.1:{port}", TEXTS)] == labels
        if "mlflow models predict" in block:  # the page's in.json holds the first text
            answer = re.search(r'\{"predictions".*\}', served.out("mlflow models predict"), re.DOTALL).group(0)
            assert json.loads(answer)["predictions"][0]["label"] == labels[0]


@pytest.mark.slow
def test_the_experiment_and_sweep_pages_as_written(tmp_path, tiny_random_bert):
    """The README's "Find good hyperparameters", docs/experiments.md's experiment and sweep and
    docs/sweeps.md in one repo on the tiny BERT (a 2-trial study, both at once): each trial is a
    child of the study's MLflow run, `dvc exp show` names the params it compares in a
    terminal's width (the plain command drew about 2 500 characters and cropped, none of the
    params; issue 55), rerunning a finished study runs nothing more, and the page's
    `dvc exp apply … && dvc exp run -S evaluate.register=true` registers the trial it takes."""
    repo, _ = sweep_repo(tmp_path, tiny_random_bert, n_trials=2, parallel=2)
    done = follow(repo, blocks_of("README.md", "slow") + blocks_of("experiments.md", "slow"), {"COLUMNS": "120"})
    shown = done.out("dvc exp show --drop")
    rows = shown.splitlines()
    assert "train.lr_encoder" in shown and "train.epochs" in shown and max(map(len, rows)) <= 120, shown
    assert any("5e-05" in row.split() and "4" in row.split() for row in rows), shown
    found = json.loads((repo / "reports" / "sweep.json").read_text())
    assert len(found["trials"]) == 2 and found["complete"] + found["failed"] == 2
    assert len(optuna.load_study(study_name="lr", storage=f"sqlite:///{repo / '.sweep' / 'optuna.db'}")
               .get_trials()) == 2  # the pages' second and third sweep found the study complete
    listed = dvc(repo, "exp", "show", "--json", "--all-commits")
    assert all(f'"{t["experiment"]}"' in listed for t in found["trials"])
    assert "| trial | experiment | train.lr_encoder |" in (repo / "reports" / "sweep.md").read_text()
    client = MlflowClient(f"sqlite:///{repo / 'mlflow.db'}")
    parent = client.search_runs([client.get_experiment_by_name("textclf").experiment_id],
                                filter_string="tags.`sweep.parent` = 'true'")
    assert len(parent) == 1, "the study ran again"
    for trial in found["trials"]:
        assert client.get_run(trial["run_id"]).data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert (trial["state"] == "fail") == (trial["reason"] is not None)
    assert found["best"], found  # the tiny BERT's trials learn
    best = next(t for t in found["trials"] if t["trial"] == found["best"]["trial"])
    assert best["state"] == "complete" and parent[0].data.metrics["best_val_macro_f1"] == best["value"]
    before = {v.run_id for v in client.search_model_versions()}  # the README's experiment's
    assert not before & {t["run_id"] for t in found["trials"]}  # trials register none
    follow(repo, blocks_of("sweeps.md", "slow"), {"COLUMNS": "120"}, edits={"lr-t7": best["experiment"]})
    assert {v.run_id for v in client.search_model_versions()} - before == {best["run_id"]}  # the one taken is


@pytest.mark.slow
def test_data_versions_as_written(tmp_path, tiny_random_bert):
    """docs/data_versions.md on the demo corpus as data/raw (the tiny BERT): the versioning block,
    new rows (with a near-copy under another class) where the page says they arrive, then the
    label-review loop and the diff between two revisions. The recipe used to commit dvc.lock but
    not the git-tracked outputs DVC leaves (data/interim/ingest_report.json among them): datadiff
    between the tags read a stale ingest report and lost why a document was dropped, and the
    rollback's `dvc repro` re-ran evaluate, labels and report and moved `challenger` (issue 55)."""
    repo = copy_repo(tmp_path / "repo")
    shutil.copytree(REPO / "data" / "sample", repo / "data" / "raw")
    write_params(repo / "params.yaml", ingest={"source": "data/raw", "near_duplicates": {"conflicts": "drop"}},
                 tokenize={"max_length": 64}, model={"name": str(tiny_random_bert)},
                 train={"epochs": 2, "lr_head": 1e-2})
    new = tmp_path / "new"
    for rel, text in NEW_DOCS.items():
        (new / rel).parent.mkdir(parents=True, exist_ok=True)
        (new / rel).write_text(text + "\n", encoding="utf-8")
    victim = sorted((repo / "data" / "raw" / "business").iterdir())[0]  # its near-copy under sport: both dropped
    words = victim.read_text(encoding="utf-8").split()
    words[len(words) // 2] = "indeed"
    (new / "sport" / "near_copy.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    diff, loop, versions = blocks_of("data_versions.md", "slow")
    done = follow(repo, [versions], edits={"# ... new rows arrive in data/raw ...": f"cp -r {new}/. data/raw/"})
    shown = done.out("datadiff data-v1 data-v2")
    assert "5 added, 1 removed, 0 relabelled, 0 edited" in shown
    assert f"business/{victim.name} (dropped at ingest: near_duplicate_conflict with sport/near_copy.txt)" in shown
    rollback = done.steps[-1]
    # nothing runs, so nothing is registered and no alias moves
    assert rollback[0].startswith("dvc repro") and ran(rollback[1]) == set(), rollback
    # the demo corpus has no suspect label: the loop runs and corrects nothing
    done = follow(repo, [loop, diff], edits={"v1 v2": "labels-before labels-corrected"})
    assert "0 document(s) to review" in done.out("labelissues review")
    assert "0 relabelled" in done.out("datadiff labels-before labels-corrected")
    assert (repo / "diff.json").is_file()
