"""Run a stage on N processes with torchrun (`torch.distributed.run`), the launcher that
`accelerate launch` itself wraps for several GPUs. (`accelerate launch --cpu
--num_processes N` starts one process: Accelerate launches several CPU processes only
through mpirun.) Accelerate then reads the torchrun environment in every worker and uses
NCCL on GPUs, gloo on CPUs.

If one worker fails, torchrun stops the others (SIGTERM, then SIGKILL), so no rank is left
waiting on a collective, and the launcher exits non-zero in one line that says what failed:
a worker writes its one-line error (a UserError, a peer lost mid-training) into the launch's
folder instead of logging it, and torchrun's wrapper names the first failure (that line, or a
rank killed by a signal) there too, instead of its traceback.

Several machines (train.nodes > 1) meet through torchrun's *static* rendezvous, a TCP store
on node 0 at train.rdzv_endpoint. Not c10d: c10d ignores --node-rank and numbers the nodes
by their sorted host names (and pids), so the node that runs the stage under DVC would not
always be global rank 0, the one rank that tracks and writes. Node 0 is the train stage
(`dvc repro`); every other node joins with `python -m textclf.train.launch --node-rank K`
(`join`, below), which trains the same params and data and writes nothing but a temp folder.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import yaml

from textclf.config import load_params
from textclf.errors import DEBUG_ENV, UserError, expected, one_line
from textclf.processes import LAUNCH_ID, die_with_parent
from textclf.signals import Interrupted
from textclf.stage import run_stage, setup_logging
from textclf.model_source import resolve_model_name
from textclf.train.paths import TrainInputs, TrainPaths, stage_inputs

log = logging.getLogger(__name__)
RDZV_FAILED = 75  # torchrun's exit status when the nodes never met (EX_TEMPFAIL)
# the launch's folder: torchrun's wrapper leaves torch's rendezvous reason and the first
# failure there, each worker its one-line error (rank-N.txt)
LAUNCH_DIR = "TEXTCLF_LAUNCH_DIR"
RDZV_FILE, FAILURE_FILE = "rendezvous.txt", "failure.txt"
# gloo's words when another rank's process or machine went away mid-collective
LOST = ("Connection closed by peer", "Connection reset by peer")
TORCHRUN = "torchrun"  # `python -m textclf.train.launch torchrun ...`: the launcher's torchrun
LOST_LINES = ("a node was lost mid-training", "a process was lost mid-training")  # lost_peer's lines


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


def torchrun_args(cfg, node_rank: int = 0) -> list[str]:
    """torchrun's options for train.processes on each of train.nodes machines."""
    if cfg.nodes == 1:
        return ["--standalone", f"--nproc-per-node={cfg.processes}"]
    return [f"--nnodes={cfg.nodes}", f"--node-rank={node_rank}", f"--nproc-per-node={cfg.processes}",
            "--rdzv-backend=static", f"--rdzv-endpoint={cfg.rdzv_endpoint}",
            f"--rdzv-conf=timeout={cfg.rdzv_timeout}", "--max-restarts=0"]


class Launched(NamedTuple):
    rc: int  # torchrun's exit status
    launch_id: str
    rendezvous: str  # torch's reason when the nodes never met
    failure: str  # the first failure, in one line ("" when nothing said)


def launch(module: str, argv: list[str], cfg, node_rank: int = 0) -> Launched:
    """`python -m module argv` on train.processes local processes (of train.nodes machines).
    SIGINT/SIGTERM received here are passed on; the workers checkpoint and stop."""
    launch_id = uuid.uuid4().hex
    logs = Path(tempfile.mkdtemp(prefix="textclf-torchrun-"))  # torchrun's own, else left in $TMPDIR
    cmd = [sys.executable, "-m", "textclf.train.launch", TORCHRUN,  # so `ps` names it
           *torchrun_args(cfg, node_rank), f"--log-dir={logs}", "-m", module, *argv]
    where = f" on node {node_rank} of {cfg.nodes}" if cfg.nodes > 1 else ""
    log.info("launching %d processes%s: %s", cfg.processes, where, shlex.join(cmd))
    env = {**os.environ, LAUNCH_ID: launch_id, LAUNCH_DIR: str(logs), "OMP_NUM_THREADS":
           os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // cfg.processes))}
    # torchrun's agent gets SIGTERM when this launcher dies, and passes it to the workers
    proc = subprocess.Popen(cmd, env=env,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    try:
        rc = proc.wait()
    except Interrupted as err:
        proc.send_signal(err.signum)
        proc.wait()
        raise
    finally:
        said = [(logs / name).read_text().strip() if (logs / name).is_file() else ""
                for name in (RDZV_FILE, FAILURE_FILE)]
        shutil.rmtree(logs, ignore_errors=True)
    return Launched(rc, launch_id, *said)


def torchrun() -> None:
    """torchrun itself (argv: TORCHRUN, its options, then the worker's), except that it fails in a file,
    for the launcher's one line, not in a traceback and log lines: a rendezvous that fails (a
    node that never came, a node 0 that never listened) exits RDZV_FAILED with torch's reason,
    a worker that fails exits 1 with the first failure."""
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main

    if os.environ.get(DEBUG_ENV) != "1":  # each elastic logger has its own level (LOGLEVEL)
        for name in list(logging.Logger.manager.loggerDict):
            if name.startswith("torch.distributed.elastic"):
                logging.getLogger(name).setLevel(logging.CRITICAL)
    folder = Path(os.environ[LAUNCH_DIR])
    try:
        main(sys.argv[2:])
    except DistError as err:
        if not any(f.name == "next_rendezvous" for f in traceback.extract_tb(err.__traceback__)):
            raise
        (folder / RDZV_FILE).write_text(str(err).strip().splitlines()[0])
        sys.exit(RDZV_FAILED)
    except ChildFailedError as err:
        (folder / FAILURE_FILE).write_text(first_failure(err, folder))
        sys.exit(1)


def first_failure(err, folder: Path) -> str:
    """torchrun's first failure (ChildFailedError) in one line: the failing rank's own line,
    else how it ended. The line wins over a signal: a rank that wrote it and then died in
    interpreter shutdown (gloo's threads can abort there: "terminate called without an active
    exception", SIGABRT) failed for the reason it gave."""
    failed, failure = err.get_first_failure()
    said = folder / f"rank-{failed}.txt"
    silent = [(r, f) for r, f in sorted(err.failures.items())
              if f.exitcode < 0 and not (folder / f"rank-{r}.txt").is_file()]
    if silent and said.is_file() and said.read_text().startswith(LOST_LINES):
        # torchrun stamps failures to the second: a rank that lost its peer can tie with the
        # peer that was killed, and the killed one is the cause
        failed, failure = silent[0]
        said = folder / f"rank-{failed}.txt"
    if failure.exitcode != 0 and said.is_file():
        return said.read_text().strip()
    if failure.exitcode < 0:
        return (f"rank {failed} (pid {failure.pid}) was killed by {failure.signal_name()} (kill, or the "
                "out-of-memory killer): rerun the same command")
    return f"rank {failed} (pid {failure.pid}) exited with status {failure.exitcode}; its error is logged above"


def lost_peer(err: BaseException) -> str | None:
    """One line for a collective that failed because another rank's process or machine went
    away, or None."""
    text = str(err).strip()
    if not isinstance(err, RuntimeError) or not any(words in text for words in LOST):
        return None
    detail = re.sub(r"^\[[^\]]*\]\s*", "", text.splitlines()[0]).split(". ")[0]  # gloo: [file:line] ...
    if int(os.environ.get("GROUP_WORLD_SIZE", "1")) > 1:
        return (f"a node was lost mid-training: rank {rank()} on node {os.environ.get('GROUP_RANK')} lost "
                f"its connection to the others ({detail}); that node stopped, crashed or lost its network "
                "(its log says which): rerun the train stage on node 0 and the join command on the others "
                "(training on several nodes starts over).")
    return (f"a process was lost mid-training: rank {rank()} lost its connection to the others ({detail}): "
            "rerun the same command to resume from the last checkpoint.")


@contextmanager
def failures_to_launcher():
    """Around a worker's work: a failure a user can fix (io.expected) or a peer lost
    mid-training goes to the launcher, which says it once in one line (N ranks would say it N
    times, torchrun would add its traceback); the worker exits 1 without a word. A bug keeps
    its traceback."""
    try:
        yield
    except Exception as err:
        lost = lost_peer(err)
        folder = os.environ.get(LAUNCH_DIR)
        if folder is None:  # torchrun started by hand: run_stage says it
            if lost:
                raise UserError(lost) from err
            raise
        if not lost and not expected(err):
            raise
        if os.environ.get(DEBUG_ENV) == "1":
            log.exception("the traceback, as %s=1 asks:", DEBUG_ENV)
        Path(folder, f"rank-{rank()}.txt").write_text(lost or one_line(err))
        # os._exit, not SystemExit: interpreter shutdown with the gloo group still open can
        # abort ("terminate called without an active exception", SIGABRT), and the launcher
        # would report a kill instead of this line; every output of the stage is atomic.
        logging.shutdown()
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(1)


def check_same_inputs(accelerator, key: str, processes: int) -> None:
    """Every rank must train the same params and data (`key`: their md5), or the ranks'
    shares of each batch differ and they drift apart or wait forever in a collective."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    keys = gather_object([key])
    nodes = sorted({r // processes for r, k in enumerate(keys) if k != keys[0]})
    if nodes:
        raise UserError(f"node(s) {', '.join(map(str, nodes))} train other params or data than node 0: "
                        "give every node the same checkout, params (the same -S too) and `dvc pull`ed "
                        "data/processed (compare md5sum data/processed/*.parquet params.yaml).")


def check_local_inputs(inputs: TrainInputs, model_name: str) -> None:
    """What this node must have before it joins: a worker that fails before the process group
    forms leaves the other nodes waiting for it (gloo's 30-minute default), not failing."""
    for flag, path, stage in (("--tokens", inputs.tokens, "tokenize"), ("--splits", inputs.splits, "split")):
        if not Path(path).is_file():
            raise UserError(f"{path} ({flag}) is missing on this node: `dvc pull` it (node 0 pushed it "
                            f"with `dvc push`), or run `dvc repro {stage}` here, before joining.")
    resolve_model_name(model_name)  # an installed package without weights fails here


def with_overrides(params: str, overrides: list[str], folder: Path) -> str:
    """params.yaml with DVC-style `-S section.key=value` overrides, written into `folder`."""
    raw = yaml.safe_load(Path(params).read_text()) or {}
    for item in overrides:
        key, eq, value = item.partition("=")
        *sections, name = key.split(".")
        if not eq or not sections:
            raise UserError(f"-S {item!r} must be section.key=value, e.g. -S train.nodes=2.")
        node = raw
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = yaml.safe_load(value)
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def reach_node_0(endpoint: str, timeout: float) -> str:
    """Wait up to `timeout` seconds for node 0's rendezvous port to accept a connection -> ""
    once it does, else why not. torch's TCP store client, which would wait instead, tries a
    second time once its timeout is spent (twice the time) and prints 40 lines of C++ stacks."""
    host, _, port = endpoint.rpartition(":")
    deadline, why = time.monotonic() + timeout, "nothing answered"
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=min(left, 5)):
                return ""
        except OSError as err:
            why = err.strerror or str(err) or type(err).__name__
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    return f"{why} at {endpoint}"


def join(argv: list[str] | None = None) -> None:
    """Join the train stage that node 0 runs: this node's train.processes workers train
    with the others; their outputs (curve, checkpoint) go to a temp folder, deleted after."""
    parser = argparse.ArgumentParser(description=join.__doc__)
    parser.add_argument("--node-rank", type=int, required=True, help="this node, 1 .. train.nodes-1")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("-S", "--set-param", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="as `dvc exp run -S` on node 0: give the same ones")
    parser.add_argument("--dvc-yaml", default="dvc.yaml", help="where the train stage's inputs are named")
    args = parser.parse_args(argv)
    setup_logging()
    folder = Path(tempfile.mkdtemp(prefix="textclf-join-"))
    try:
        params = with_overrides(args.params, args.set_param, folder)
        loaded = load_params(params)
        cfg = loaded.train
        if not 0 < args.node_rank < cfg.nodes:
            raise UserError(f"--node-rank {args.node_rank} must be in 1..{cfg.nodes - 1} for train.nodes="
                            f"{cfg.nodes} (node 0 is the train stage itself; set train.nodes with -S).")
        inputs = stage_inputs(args.dvc_yaml)
        check_local_inputs(inputs, loaded.model.name)
        node = TrainPaths(tokens=inputs.tokens, splits=inputs.splits, params=params,
                          model_dir=str(folder / "model-dir"), curve=str(folder / "curve"),
                          guards=str(folder / "guards"), movement=str(folder / "movement"),
                          run_file=str(folder / "run-file"), checkpoint_dir=str(folder / "checkpoint-dir"))
        unreached = reach_node_0(cfg.rdzv_endpoint, cfg.rdzv_timeout)
        launched = None if unreached else launch("stages.train", node.argv(), cfg, args.node_rank)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    why = unreached if launched is None else launched.rendezvous
    if launched is None or why:
        raise UserError(f"node {args.node_rank} could not join node 0 at train.rdzv_endpoint="
                        f"{cfg.rdzv_endpoint} within train.rdzv_timeout={cfg.rdzv_timeout} s "
                        f"({why}): start the train stage on node 0 (dvc repro) and check that this node "
                        "reaches it.")
    if launched.rc != 0:
        raise UserError(f"node {args.node_rank} failed: {launched.failure}" if launched.failure else
                        f"node {args.node_rank} failed (torchrun exit {launched.rc}); the failing rank's "
                        "error is logged above, and node 0's log has the rest.")
    log.info("node %d of %d done: node 0 wrote the model and logged the run", args.node_rank, cfg.nodes)


if __name__ == "__main__":
    if sys.argv[1:2] == [TORCHRUN]:
        torchrun()
    else:
        run_stage(join)
