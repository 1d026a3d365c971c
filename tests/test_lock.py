"""dvc.lock as committed records the committed code: a fresh clone's `dvc status` then says
what changed in the data, not that every stage's code did (issue 52: dvc.lock once recorded
another checksum of config.py, so every stage of a fresh clone showed as changed). After a
change to a stage's code, `make repro` and commit dvc.lock with it."""
import hashlib

import yaml

from conftest import REPO


def test_every_file_dvc_lock_records_as_a_dependency_has_the_checksum_it_records():
    lock = yaml.safe_load((REPO / "dvc.lock").read_text())
    stale = []
    for name, stage in lock["stages"].items():
        for dep in stage.get("deps", []):
            path = REPO / dep["path"]
            if path.is_file() and hashlib.md5(path.read_bytes()).hexdigest() != dep["md5"]:
                stale.append(f"{name}: {dep['path']}")
    assert not stale, f"dvc.lock is older than these files (run `make repro`, commit dvc.lock): {stale}"
