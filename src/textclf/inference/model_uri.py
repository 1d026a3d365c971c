"""Where an MLflow model URI points: the local folder of the logged model, downloaded with
the quick store settings, so that predict and serve fail in one line within seconds when the
tracking server is down or the model is not there. mlflow is imported only for a URI."""
from __future__ import annotations

from pathlib import Path

from textclf.errors import UserError


def pyfunc_folder(model: str) -> Path:
    """An MLflow model: a URI (`models:/textclf@champion`, `runs:/…`, `models:/m-…`) or a
    folder -> the local folder that holds its MLmodel, in one line and within seconds when
    the tracking server is down (MLflow's own client retries for minutes) or the model is not
    there."""
    local = Path(model) if ":/" not in model else _download(model)
    if not (local / "MLmodel").is_file():
        what = "no MLmodel file in it" if local.is_dir() else "no such folder"
        raise UserError(f"{model} is not an MLflow model ({what}); pass a logged model: "
                         "models:/textclf@champion, runs:/<run id>/model or the folder holding its MLmodel.")
    return local


def pinned(model: str) -> str:
    """`models:/<name>@<alias>` -> `models:/<name>/<version>`, the version the alias names now;
    any other URI or folder as it is. A long job scores one version and says which, though the
    alias may move while it runs."""
    if not model.startswith("models:/") or "@" not in model:
        return model
    import mlflow

    from textclf.tracking.runs import tracking_uri
    from textclf.tracking.store import QUICK_HTTP, check_readable, store_calls
    name, alias = model[len("models:/"):].rsplit("@", 1)
    mlflow.set_tracking_uri(tracking_uri())
    check_readable(mlflow.get_tracking_uri())
    try:
        with store_calls(QUICK_HTTP):
            version = mlflow.MlflowClient().get_model_version_by_alias(name, alias).version
    except mlflow.exceptions.MlflowException as err:
        raise UserError(f"{model}: {err.message.splitlines()[0]} (tracking store "
                        f"{mlflow.get_tracking_uri()}; set MLFLOW_TRACKING_URI).") from None
    return f"models:/{name}/{version}"


def _download(model: str) -> Path:
    import mlflow  # only for URIs: a local folder needs no tracking store

    from textclf.tracking.runs import tracking_uri
    from textclf.tracking.store import QUICK_HTTP, check_readable, store_calls
    mlflow.set_tracking_uri(tracking_uri())
    check_readable(mlflow.get_tracking_uri())
    try:
        with store_calls(QUICK_HTTP):
            return Path(mlflow.artifacts.download_artifacts(artifact_uri=model))
    except mlflow.exceptions.MlflowException as err:
        raise UserError(f"{model}: {err.message.splitlines()[0]} (tracking store "
                         f"{mlflow.get_tracking_uri()}; set MLFLOW_TRACKING_URI).") from None


def model_folder(model: str) -> Path:
    """A model folder (written by the train stage or the export stage), or an MLflow model
    URI or pyfunc folder -> the folder the pyfunc runs: its PyTorch model folder, or its
    exported ONNX folder."""
    return served_folder(model)[0]


def served_artifact(artifacts: dict) -> str:
    """The pyfunc's artifact that serves: an ONNX export (`onnx_dir`), an export where PyTorch
    serves a blend (`export_dir`: the model's copy and the baseline), or a model folder."""
    return next(k for k in ("onnx_dir", "export_dir", "model_dir") if k in artifacts)


def served_folder(model: str) -> tuple[Path, dict]:
    """model_folder, and the pyfunc's model_config (a PyTorch model evaluate logged carries
    serve.coverage and serve.review_below there, an ONNX one in its export.json; {} for a folder)."""
    local = Path(model)
    if ":/" not in model and not (local / "MLmodel").is_file():
        return local, {}
    import yaml

    local = pyfunc_folder(model)
    flavor = yaml.safe_load((local / "MLmodel").read_text())["flavors"]["python_function"]
    artifacts = flavor["artifacts"]
    folder = local / artifacts[served_artifact(artifacts)]["path"]
    return folder, flavor.get("config") or {}  # mlflow.pyfunc writes model_config as `config`
