"""What a DVC remote must carry for a teammate's pull to run nothing again. The pull itself, from
a local-path remote into a fresh `git clone`, is docs/team_setup.md's blocks, run from the page by
`test_pages.py::test_team_setup_a_teammate_pulls_and_nothing_runs_as_written`."""
import re
import subprocess

import yaml

from conftest import REPO

UP_TO_DATE = "Data and pipelines are up to date."


def ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '(\w+)'", output))


def uncached(stage: dict, kinds=("outs", "metrics", "plots")) -> list[str]:
    """The stage's `cache: false` paths among `kinds`."""
    entries = [o for kind in kinds for o in stage.get(kind) or [] if isinstance(o, dict)]
    return [path for entry in entries for path, opts in entry.items() if (opts or {}).get("cache") is False]


STAGES = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def test_every_uncached_output_travels_in_git():
    """A `cache: false` output is in neither the DVC cache nor a remote: git must carry it."""
    paths = [path for stage in STAGES.values() for path in uncached(stage)]
    assert "reports/metrics.json" in paths and "reports/confusion.csv" in paths
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO,
                             capture_output=True, text=True).stdout.split()
    assert ignored == [], f"git-ignored and not in the DVC cache, so a teammate's pull lacks them: {ignored}"


def test_train_can_be_restored_from_a_pulled_run_cache():
    """DVC keeps no run-cache entry for a stage with a `cache: false` out, and `dvc push
    --run-cache` does not push uncached metrics or plots: a clone could not restore train."""
    assert uncached(STAGES["train"]) == []
