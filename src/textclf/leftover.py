"""After `dvc repro` (`make repro` runs this): remove a training checkpoint that DVC made useless.

An interrupted training keeps its checkpoint so that the next `dvc repro` resumes it. But when
DVC's run-cache already holds a result for the same params and data (that training ran to the
end before), `dvc repro` restores that result instead of running the stage: the same weights a
resume would reach, and the checkpoint (hundreds of MB) would stay behind forever. Once `dvc
repro` has succeeded, the train stage is up to date, so a checkpoint made with the current params
and data is one that nothing will resume: it goes. One made with other params stays (switching
them back resumes it).

    python -m textclf.leftover            # the train stage's paths, from dvc.yaml
"""
from __future__ import annotations

import argparse
import logging
import shutil
from pathlib import Path

from textclf.config import load_params
from textclf.files import read_json
from textclf.stage import run_stage, setup_logging
from textclf.train.checkpoint import LATEST
from textclf.train.paths import TrainInputs, stage_inputs

log = logging.getLogger(__name__)


def remove_if_current(inputs: TrainInputs) -> bool:
    """Remove the checkpoint folder if its key is the current params' and data's -> removed?"""
    from textclf.train.run import checkpoint_key  # torch: only when there is a checkpoint
    latest, params = Path(inputs.checkpoint_dir) / LATEST, load_params(inputs.params)
    if not latest.is_file() or params.train.keep_checkpoint:  # kept on purpose
        return False
    if read_json(latest).get("key") != checkpoint_key(params, inputs):
        log.info("kept %s: made with other params or data; it resumes if they come back",
                 inputs.checkpoint_dir)
        return False
    shutil.rmtree(inputs.checkpoint_dir)
    log.info("removed %s: the train stage is up to date with its params and data (DVC restored "
             "the result from its run-cache), so nothing will resume it", inputs.checkpoint_dir)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dvc-yaml", default="dvc.yaml")
    setup_logging()
    remove_if_current(stage_inputs(parser.parse_args(argv).dvc_yaml))


if __name__ == "__main__":
    run_stage(main)
