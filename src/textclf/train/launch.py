"""Run a stage on N processes with torchrun (`torch.distributed.run`), the launcher that
`accelerate launch` itself wraps for several GPUs. (`accelerate launch --cpu
--num_processes N` starts one process: Accelerate launches several CPU processes only
through mpirun.) Accelerate then reads the torchrun environment in every worker and uses
NCCL on GPUs, gloo on CPUs.

If one worker fails, torchrun stops the others (SIGTERM, then SIGKILL), so no rank is left
waiting on a collective, and the launcher exits non-zero.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

from textclf.io import Interrupted, die_with_parent

log = logging.getLogger(__name__)


def is_worker() -> bool:
    """Started by torchrun (or accelerate launch): a rank of a multi-process run."""
    return "LOCAL_RANK" in os.environ


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def forbid_tracking() -> None:
    """Ranks other than 0 never open the tracking store (no SQLite writers racing): any
    MLflow call there fails loudly on this URI instead of writing."""
    os.environ["MLFLOW_TRACKING_URI"] = f"rank-{rank()}-never-tracks:///"
    logging.getLogger().setLevel(logging.WARNING)  # rank 0 logs for everyone


LAUNCH_ID = "TEXTCLF_LAUNCH_ID"  # lets the launcher find the run its rank 0 opened


def launch(module: str, argv: list[str], processes: int) -> tuple[int, str]:
    """`python -m module argv` on `processes` local processes -> (torchrun's exit code,
    launch id). SIGINT/SIGTERM received here are passed on; the workers checkpoint and stop."""
    launch_id = uuid.uuid4().hex
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={processes}", "-m", module, *argv]
    log.info("launching %d processes: %s", processes, " ".join(cmd))
    env = {**os.environ, LAUNCH_ID: launch_id, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS") or
           str(max(1, (os.cpu_count() or 1) // processes))}  # torchrun would set 1
    # torchrun's agent gets SIGTERM when this launcher dies, and passes it to the workers
    proc = subprocess.Popen(cmd, env=env,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    try:
        return proc.wait(), launch_id
    except Interrupted as err:
        proc.send_signal(err.signum)
        proc.wait()
        raise
