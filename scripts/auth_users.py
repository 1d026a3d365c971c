"""`scripts/server.sh add-user NAME READ|EDIT`: an account on the team's tracking server (MLflow's
basic-auth app) with that permission on the pipeline's experiment and registered model(s).

Run by server.sh with the admin's credentials in MLFLOW_TRACKING_USERNAME / _PASSWORD. The
experiment and the models are created here, by the admin, when missing: otherwise the first user
to create them would own them (MANAGE) and could lock the team out of the champion.
A second add-user for the same NAME keeps the password and sets the new permission."""
from __future__ import annotations

import argparse
import logging
import os
import re
import secrets
import sys
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.server.auth.client import AuthServiceClient
from mlflow.tracking import MlflowClient

log = logging.getLogger("add-user")
PERMISSIONS = ("READ", "EDIT")
# NAME names the password file too: no separator, no leading dot, so it stays in the folder
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/server.sh add-user")
    parser.add_argument("name")
    parser.add_argument("permission", type=str.upper, choices=PERMISSIONS)
    parser.add_argument("--experiment", default=os.environ.get("MLFLOW_EXPERIMENT_NAME") or "textclf",
                        help="experiment name (default: MLFLOW_EXPERIMENT_NAME, else textclf)")
    parser.add_argument("--model", action="append", dest="models",
                        help="registered model name, repeatable (default: textclf, params.yaml's "
                             "evaluate.registered_model)")
    parser.add_argument("--passwords", type=Path, required=True, help="folder of the users' password files")
    return parser.parse_args(argv)


def ensure_user(auth: AuthServiceClient, name: str, folder: Path) -> str | None:
    """Create the account if missing -> its new password (None when it existed)."""
    try:
        auth.get_user(name)
        return None
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
    password = secrets.token_urlsafe(24)
    write_password(folder, name, password)
    auth.create_user(name, password)
    return password


def write_password(folder: Path, name: str, password: str) -> Path:
    """folder/NAME.password, mode 600 in a folder of mode 700 before the password is in it:
    mkdir and open set a mode only on what they create, and either may exist from before."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    path = folder / f"{name}.password"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(password + "\n")
    return path


def ensure_experiment(client: MlflowClient, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    # No artifact location: the server's own root (mlflow-artifacts:/), as the pipeline does.
    return exp.experiment_id if exp else client.create_experiment(name)


def ensure_model(client: MlflowClient, name: str) -> None:
    try:
        client.get_registered_model(name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(name)


def grant(auth: AuthServiceClient, name: str, kind: str, key: str, permission: str) -> None:
    """Set the user's permission on one resource, replacing an earlier one (grant does not)."""
    try:
        auth.grant_user_permission(name, kind, key, permission)
    except MlflowException as err:
        if err.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        auth.revoke_user_permission(name, kind, key)
        auth.grant_user_permission(name, kind, key, permission)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    args = parse(argv)
    if not NAME.fullmatch(args.name):
        sys.exit(f"server.sh: add-user: NAME {args.name!r} is not a user name: use letters, digits and "
                 "._@+- (at most 64, starting with a letter or digit)")
    uri = os.environ["MLFLOW_TRACKING_URI"]
    auth, client = AuthServiceClient(uri), MlflowClient(uri)
    models = args.models or ["textclf"]
    try:
        password = ensure_user(auth, args.name, args.passwords)
        exp_id = ensure_experiment(client, args.experiment)
        grant(auth, args.name, "experiment", exp_id, args.permission)
        for model in models:
            ensure_model(client, model)
            grant(auth, args.name, "registered_model", model, args.permission)
    except MlflowException as err:
        first = (str(err.message).strip().splitlines() or [err.error_code])[0][:300]
        sys.exit(f"server.sh: add-user {args.name} failed on {uri}: {first}")
    log.info("user %s: %s on experiment %s (id %s) and registered model %s", args.name,
             args.permission, args.experiment, exp_id, ", ".join(models))
    if password:
        log.info("password (also in %s, mode 600): %s", args.passwords / f"{args.name}.password", password)
    log.info("the user sets MLFLOW_TRACKING_USERNAME=%s and MLFLOW_TRACKING_PASSWORD", args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
