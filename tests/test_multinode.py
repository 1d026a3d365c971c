"""Training on several machines (train.nodes, torchrun's static rendezvous at
train.rdzv_endpoint): two launchers on 127.0.0.1 take the same code path as two machines.

Node 0 is the train stage; node 1 joins with `python -m textclf.train.launch --node-rank 1`
from its own folder (its own "checkout": params, tokens, splits). The encoder is conftest's
tiny RANDOM BERT with dropout 0, as in test_multiprocess: 2 nodes of 1 process must train
like 1 process, rank 0 alone tracks, node 1 writes nothing."""
import os
import shutil
import subprocess
import sys
import uuid
from datetime import datetime

import pytest
import yaml
from mlflow.tracking import MlflowClient

from textclf.config import parse_section
from textclf.errors import UserError

from conftest import REPO, copy_prepared, free_port, save_tiny_random_bert, write_params
from test_multiprocess import assert_trained_alike, sixty_in_training, train

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gloo on lo, /proc")
STAGE_ARGS = ["--tokens", "t.parquet", "--splits", "sp.parquet"]


@pytest.fixture(scope="module")
def tiny_no_dropout(tmp_path_factory):
    """TINY and RANDOM (not pretrained), dropout 0: the same steps give the same weights."""
    return save_tiny_random_bert(tmp_path_factory.mktemp("tiny-random-bert-no-dropout"), dropout=0.0)


def node_env(folder, tmp=None) -> dict:
    """Each node its own store (node 1 must never use it) and gloo on the loopback."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}", "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'src'}",
           "GLOO_SOCKET_IFNAME": "lo"}
    return {**env, "TMPDIR": str(tmp)} if tmp else env


def node0_cmd(params: str, name: str) -> list[str]:
    return [sys.executable, "-m", "stages.train", "--params", params, *STAGE_ARGS,
            "--model-dir", f"{name}/model", "--curve", f"{name}/curve.csv", "--guards", f"{name}/guards.json",
            "--movement", f"{name}/move.csv", "--run-file", f"{name}/run.json", "--checkpoint-dir", f"{name}/ckpt"]


def node1_folder(tmp, params, name: str = "params.yaml") -> tuple:
    """Node 1's checkout: the same params (as `name`) and data, a dvc.yaml naming them ->
    (folder, its files, its TMPDIR)."""
    node1 = tmp / "node1"
    (node1 / "tmp").mkdir(parents=True)
    shutil.copy(params, node1 / name)
    for name in ("t.parquet", "sp.parquet"):
        shutil.copy(tmp / name, node1 / name)
    cmd = "python -m stages.train " + " ".join(STAGE_ARGS) + " --model-dir m"
    (node1 / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": {"cmd": cmd}}}))
    return node1, sorted(p.name for p in node1.iterdir()), node1 / "tmp"


def join_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "textclf.train.launch", *args]


@pytest.mark.slow
def test_two_nodes_train_like_one_process(tmp_path, prepared_tiny, tiny_no_dropout, monkeypatch):
    """2 launchers (--nnodes 2, one process each) on 127.0.0.1: the same optimizer steps and
    validation metrics as 1 process, weights within rounding, one FINISHED run holding each
    epoch's metrics once; node 1 (started first, given the params as -S) writes nothing."""
    sixty_in_training(tmp_path, prepared_tiny, tiny_no_dropout, monkeypatch)
    write_params(tmp_path / "params.yaml", train={"epochs": 2, "batch_size": 6, "lr_encoder": 1e-4,
                                                  "lr_head": 1e-4, "keep_checkpoint": True})
    one = train(tmp_path, "one", 1)
    assert one.returncode == 0, one.stderr[-3000:]

    rdzv = {"nodes": 2, "rdzv_endpoint": f"127.0.0.1:{free_port()}", "rdzv_timeout": 120}
    node1, files, node1_tmp = node1_folder(tmp_path, tmp_path / "params.yaml")
    overrides = [w for k, v in rdzv.items() for w in ("-S", f"train.{k}={v}")]
    with open(tmp_path / "node1.log", "w") as out:
        joiner = subprocess.Popen(join_cmd("--node-rank", "1", *overrides), cwd=node1,
                                  env=node_env(node1, node1_tmp), stdout=out, stderr=subprocess.STDOUT)
    shutil.copy(tmp_path / "params.yaml", tmp_path / "nodes.yaml")
    write_params(tmp_path / "nodes.yaml", train=rdzv)  # what `dvc exp run -S` leaves in params.yaml
    two = subprocess.run(node0_cmd("nodes.yaml", "two"), cwd=tmp_path, env=node_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert joiner.wait(timeout=120) == 0, (tmp_path / "node1.log").read_text()[-3000:]
    assert two.returncode == 0, two.stderr[-3000:]
    assert "launching 1 processes on node 0 of 2" in two.stderr
    assert_trained_alike(tmp_path)

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("textclf").experiment_id])
    assert len(runs) == 2 and {r.info.status for r in runs} == {"FINISHED"}
    run_two = yaml.safe_load((tmp_path / "two" / "run.json").read_text())["run_id"]
    assert client.get_run(run_two).data.params["train.nodes"] == "2"
    for metric in ("val_accuracy", "train_loss"):
        assert [m.step for m in client.get_metric_history(run_two, metric)] == [1, 2], metric
    # node 1 wrote no output, no store, nothing left in its temp folder
    assert sorted(p.name for p in node1.iterdir()) == files and not any(node1_tmp.iterdir())


def leftovers(marker: str) -> list[str]:
    """Command lines of live (not zombie) processes that name `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(cmdline)
    return found


def logged_at(line: str) -> float:
    """Seconds since the epoch of a log line (setup_logging's asctime)."""
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


@pytest.mark.slow
def test_a_node_that_never_joins_times_out_in_one_line(tmp_path, prepared_tiny, monkeypatch):
    """Node 0 alone with train.nodes=2 and a 5 s rendezvous timeout: exit 1 soon after, one
    line naming the endpoint, the timeout and the join command, no traceback, no run left
    RUNNING and no process left behind."""
    copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    endpoint, marker = f"127.0.0.1:{free_port()}", f"mn-{uuid.uuid4().hex}"
    write_params(tmp_path / "params.yaml", train={"nodes": 2, "rdzv_endpoint": endpoint, "rdzv_timeout": 5})
    shutil.copy(tmp_path / "params.yaml", tmp_path / f"{marker}.yaml")
    proc = subprocess.run(node0_cmd(f"{marker}.yaml", "out"), cwd=tmp_path, env=node_env(tmp_path),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    launched = next(line for line in proc.stderr.splitlines() if "launching 1 processes on node 0" in line)
    assert " -m textclf.train.launch torchrun --nnodes=2 " in launched  # as `ps` shows it, not `-c '…'`
    waited = logged_at(errors[0]) - logged_at(launched)
    assert 5 <= waited < 5 + 25, waited  # the timeout, plus torchrun's start and the run's cleanup
    assert (f"train.nodes=2: the other nodes did not join at train.rdzv_endpoint={endpoint} within "
            "train.rdzv_timeout=5 s") in errors[0]
    assert "python -m textclf.train.launch --node-rank K" in errors[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "model").exists()
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("textclf")
    assert {r.info.status for r in client.search_runs([exp.experiment_id])} <= {"FAILED"}
    assert leftovers(marker) == []


def test_a_joining_node_without_node_0_times_out_in_one_line(tmp_path, prepared_tiny, monkeypatch):
    """The join command with nobody listening at the endpoint: exit 1 in one line naming
    the endpoint and the fix, its temp folder removed, no process left."""
    copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    endpoint, marker = f"127.0.0.1:{free_port()}", f"mn-{uuid.uuid4().hex}"
    node1, files, node1_tmp = node1_folder(tmp_path, tmp_path / "params.yaml", f"{marker}.yaml")
    started = datetime.now()
    proc = subprocess.run(join_cmd("--node-rank", "1", "--params", f"{marker}.yaml", "-S", "train.nodes=2",
                                   "-S", f"train.rdzv_endpoint={endpoint}", "-S", "train.rdzv_timeout=5"),
                          cwd=node1, env=node_env(node1, node1_tmp), capture_output=True, text=True, timeout=180)
    waited = (datetime.now() - started).total_seconds()
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    # the error and the launch line, nothing else: no c10d socket timeouts or C++ stacks (issue 55, item 6)
    assert len(errors) == 1 and len(proc.stderr.strip().splitlines()) <= 2, proc.stderr[-3000:]
    assert 5 <= waited < 5 + 15, waited  # the timeout once, plus Python's and torchrun's start
    assert (f"node 1 could not join node 0 at train.rdzv_endpoint={endpoint} within "
            "train.rdzv_timeout=5 s") in errors[0]
    assert sorted(p.name for p in node1.iterdir()) == files and not any(node1_tmp.iterdir())
    assert leftovers(marker) == [] and leftovers(str(node1_tmp)) == []  # the join, torchrun


@pytest.mark.parametrize("train, message", [
    ({"nodes": 2}, "train.rdzv_endpoint='' must be host:port of node 0"),
    ({"nodes": 2, "rdzv_endpoint": "node0"}, "train.rdzv_endpoint='node0' must be host:port"),
    ({"nodes": 2, "rdzv_endpoint": "node0:99999"}, "must be host:port"),
    ({"nodes": 2, "processes": 2, "batch_size": 6, "rdzv_endpoint": "node0:29400"},
     "make it a multiple of processes × nodes"),
])
def test_multinode_params_are_checked_in_one_line(train, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(")) as err:
        parse_section("train", train)
    assert "\n" not in str(err.value)


def test_join_refuses_a_node_rank_out_of_range(tmp_path):
    """--node-rank 0 is the stage itself, and train.nodes=2 has only node 1 to join."""
    write_params(tmp_path / "params.yaml", train={"nodes": 2, "rdzv_endpoint": "127.0.0.1:29400"})
    for rank in ("0", "2"):
        proc = subprocess.run(join_cmd("--node-rank", rank), cwd=tmp_path, env=node_env(tmp_path),
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1
        assert f"--node-rank {rank} must be in 1..1 for train.nodes=2" in proc.stderr


@pytest.mark.slow
def test_a_node_with_other_params_stops_every_node_before_training(tmp_path, prepared_tiny, monkeypatch):
    """Node 1 joins with another learning rate: every rank compares the md5 of its params and
    data at the start, so both nodes stop in a line naming node 1, and no run is opened."""
    copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    rdzv = {"nodes": 2, "rdzv_endpoint": f"127.0.0.1:{free_port()}", "rdzv_timeout": 120}
    node1, _, node1_tmp = node1_folder(tmp_path, tmp_path / "params.yaml")
    overrides = [w for k, v in {**rdzv, "lr_head": 0.5}.items() for w in ("-S", f"train.{k}={v}")]
    with open(tmp_path / "node1.log", "w") as out:
        joiner = subprocess.Popen(join_cmd("--node-rank", "1", *overrides), cwd=node1,
                                  env=node_env(node1, node1_tmp), stdout=out, stderr=subprocess.STDOUT)
    write_params(tmp_path / "params.yaml", train=rdzv)
    node0 = subprocess.run(node0_cmd("params.yaml", "out"), cwd=tmp_path, env=node_env(tmp_path),
                           capture_output=True, text=True, timeout=300)
    assert joiner.wait(timeout=120) == 1
    expected = "node(s) 1 train other params or data than node 0"
    assert node0.returncode == 1 and expected in node0.stderr, node0.stderr[-3000:]
    # one line on each node, no torchrun traceback (each node printed 36 lines, 3 errors)
    node1_log = (tmp_path / "node1.log").read_text()
    for log, says in [(node0.stderr, "training on train.processes=1 processes on each of train.nodes=2 failed: "),
                      (node1_log, "node 1 failed: ")]:
        errors = [line for line in log.splitlines() if " ERROR " in line]
        assert len(errors) == 1 and f"{says}{expected}" in errors[0], log[-3000:]
        # launching…, the error (2 here), and room for a stray warning of gloo's on another host
        assert "Traceback" not in log and len(log.splitlines()) <= 4, log[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.search_runs([client.get_experiment_by_name("textclf").experiment_id]) == []



@pytest.mark.parametrize("exitcode", [1, -6])
def test_a_rank_that_said_its_error_and_then_aborted_fails_for_that_reason(tmp_path, exitcode):
    """Both ranks saw node 1's other params and wrote the line; rank 0 then died in interpreter
    shutdown by SIGABRT (gloo: "terminate called without an active exception"). The launcher
    said "rank 0 was killed by SIGABRT ... rerun the same command", which would fail again: it
    now says the line the rank wrote, for a signal as for an exit status."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from textclf.train.launch import first_failure
    (tmp_path / "rank-0.txt").write_text("node(s) 1 train other params or data than node 0: give ...\n")
    failure = ProcessFailure(local_rank=0, pid=4242, exitcode=exitcode, error_file=str(tmp_path / "none.json"))
    said = first_failure(ChildFailedError("stages.train", {0: failure}), tmp_path)
    assert said == "node(s) 1 train other params or data than node 0: give ..."
    (tmp_path / "rank-0.txt").unlink()  # a rank that said nothing: how it ended
    how = "was killed by SIGABRT" if exitcode < 0 else "exited with status 1"
    assert how in first_failure(ChildFailedError("stages.train", {0: failure}), tmp_path)


def test_a_killed_rank_is_the_cause_over_the_rank_that_lost_it(tmp_path):
    """SIGKILL to rank 1: rank 0 writes "a process was lost" and exits at once; torchrun stamps
    both failures to the same second, and min() picked rank 0. The killed rank is the cause."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from textclf.train.launch import first_failure
    (tmp_path / "rank-0.txt").write_text("a process was lost mid-training: rank 0 lost its connection ...")
    none = str(tmp_path / "none.json")
    failures = {0: ProcessFailure(0, 11, 1, none), 1: ProcessFailure(1, 12, -9, none)}
    failures[0].timestamp = failures[1].timestamp  # the tie
    assert first_failure(ChildFailedError("stages.train", failures), tmp_path).startswith(
        "rank 1 (pid 12) was killed by SIGKILL")

LOSING_A_NODE = """
import os, torch, torch.distributed as dist
from textclf.train.launch import failures_to_launcher
dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    os._exit(0)  # node 1 goes, mid-training
with failures_to_launcher():
    for _ in range(100):
        dist.all_reduce(torch.ones(1))
"""


def test_a_rank_that_loses_a_node_says_so_in_one_line_for_its_launcher(tmp_path):
    """Two real gloo ranks, one per node; node 1's process vanishes: rank 0's collective fails
    (it printed 40 lines of traceback, then torchrun 30 more and the launcher "the failing rank's
    error is logged above"). Now rank 0 leaves one line for its launcher, saying a node was
    lost, and exits 1 without a word; the launcher says that line (the node with other params,
    above, takes the same path end to end). It exits without interpreter shutdown: there, with
    the gloo group open, 2 runs in 10 aborted (SIGABRT, exit -6) after writing the line."""
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, "-c", LOSING_A_NODE], stderr=subprocess.PIPE, text=True, env={
        **os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2", "RANK": str(r),
        "LOCAL_RANK": "0", "GROUP_RANK": str(r), "GROUP_WORLD_SIZE": "2", "GLOO_SOCKET_IFNAME": "lo",
        "TEXTCLF_LAUNCH_DIR": str(tmp_path)}) for r in (0, 1)]
    stderr = [proc.communicate(timeout=120)[1] for proc in ranks]
    assert [proc.returncode for proc in ranks] == [1, 0], stderr
    assert "Traceback" not in stderr[0], stderr[0]
    said = (tmp_path / "rank-0.txt").read_text()
    assert said.startswith("a node was lost mid-training: rank 0 on node 0 lost its connection") and "\n" not in said
    assert "Connection closed by peer" in said or "Connection reset by peer" in said


def test_join_without_the_data_stops_before_joining(tmp_path, prepared_tiny, monkeypatch):
    """A node that never pulled the tokens would fail after the rendezvous, leaving node 0's
    ranks waiting: the join command checks them first, in one line naming the file."""
    copy_prepared(prepared_tiny, tmp_path, monkeypatch)
    node1, _, node1_tmp = node1_folder(tmp_path, tmp_path / "params.yaml")
    (node1 / "t.parquet").unlink()
    proc = subprocess.run(join_cmd("--node-rank", "1", "-S", "train.nodes=2", "-S", "train.rdzv_endpoint=127.0.0.1:1"),
                          cwd=node1, env=node_env(node1, node1_tmp), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "launching" not in proc.stderr
    assert "t.parquet (--tokens) is missing on this node: `dvc pull` it" in proc.stderr
    assert "run `dvc repro tokenize` here" in proc.stderr  # the tokens are tokenize's (issue 60, item 8)
    assert not any(node1_tmp.iterdir())
