"""The train stage as `python -m stages.train` runs it, pausing at exact points so that a test
can break or mend the tracking store there: the tiny model trains too fast to aim from outside.
Usage: python tests/paused_train.py DIR E:S [E:S ...] -- <train stage args>.
At each point the stage creates DIR/at-E-S, then waits for DIR/go-E-S. S 0: right after epoch
E's checkpoint is saved, before the epoch goes to MLflow; S > 0: right after optimizer step S
of epoch E."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stages import train  # noqa: E402
from textclf.stage import run_stage  # noqa: E402
from signalled_train import at  # noqa: E402  (tests/ is sys.path[0] for a script in it)

WAIT_S = 300  # a test that never answers must not leave the stage waiting for ever


def pause(folder: Path, epoch: int, step: int) -> None:
    (folder / f"at-{epoch}-{step}").touch()
    go, deadline = folder / f"go-{epoch}-{step}", time.monotonic() + WAIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"nobody created {go} in {WAIT_S} s")
        time.sleep(0.05)


if __name__ == "__main__":
    folder, *rest = sys.argv[1:]
    points, args = rest[:rest.index("--")], rest[rest.index("--") + 1:]
    Path(folder).mkdir(parents=True, exist_ok=True)
    at({tuple(int(n) for n in p.split(":")) for p in points}, lambda e, s: pause(Path(folder), e, s))
    sys.argv = [sys.argv[0], *args]
    run_stage(train.main)
