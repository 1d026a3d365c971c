"""The trained classifier as an MLflow pyfunc model, for every head, in PyTorch or exported
to ONNX (serve.format).

Input: a DataFrame with a `text` column (or a list of strings). Output: a DataFrame with
`label`, `probability`, `prob_<class>` per class, then `labels`, `set_size` and `needs_review`
as the folder's recorded review decides (inference.loading, as predict and --table answer).
The model folder (safetensors + tokenizer + params.json), or the exported folder (the ONNX
file + tokenizer.json + export.json), is an artifact, and this package ships with the model
(`code_paths`), so `mlflow models predict/serve --env-manager local` needs nothing else. An ONNX model loads
onnxruntime and tokenizers, not torch or transformers, and requires only what it imports.
"""

import importlib.metadata
import os
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import infer_signature
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

import textclf

from textclf.errors import UserError, positive_int_env
from textclf.inference.base import TextPredictor
from textclf.inference.model_uri import served_artifact
from textclf.inference.rows import table_answers
from textclf.model.exported import BLEND_KEY, read_export

TEXT_COLUMN = "text"
# Per request, so one huge request cannot hold the workers long after its client gave up
# (the scoring server answers 504 after MLFLOW_SCORING_SERVER_REQUEST_TIMEOUT, 60 s).
MAX_ROWS_ENV, MAX_CHARS_ENV = "TEXTCLF_SERVE_MAX_ROWS", "TEXTCLF_SERVE_MAX_CHARS"
MAX_ROWS, MAX_CHARS = 1000, 5_000_000
PACKAGE = Path(textclf.__file__).parent
# Every distribution that loading the model imports (tests/test_serving.py checks the list
# against the imports of the textclf modules a load brings in); the versions are the ones
# it was logged with.
REQUIREMENTS: tuple[str, ...] = ("torch", "transformers", "tokenizers", "safetensors", "pandas",
                                 "numpy", "pyarrow", "pyyaml", "mlflow", "tqdm")
ONNX_REQUIREMENTS: tuple[str, ...] = ("onnxruntime", "tokenizers", "pandas", "numpy", "pyarrow", "pyyaml",
                                      "mlflow", "tqdm")
BLEND_REQUIREMENTS: tuple[str, ...] = ("scikit-learn", "scipy", "safetensors")  # inference.blend's


# Table mode, set on Spark's executors through spark_udf's extra_env (textclf.spark): every
# row answered, an unscorable one with its skip_reason as --table does, and no request limits
# (they guard the REST server, not a batch of a table). TABLE_MODE in the MLmodel's metadata
# says the logged code has it.
TABLE_ENV, TABLE_MODE = "TEXTCLF_PYFUNC_TABLE_ROWS", "textclf_table_rows"

REFUSED = "TEXTCLF_REQUEST_REFUSED"  # error_class of our 400s (textclf.serve keeps their message)


class RequestRefused(MlflowException):
    """A 400 whose message stays the one line we wrote. MLflow's scoring server prefixes the
    message of an exception from predict() with "Failed to predict data '<the request's rows>'.":
    three lines that echo the client's text back into answers and logs."""

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE, error_class=REFUSED)

    @property
    def message(self) -> str:
        return self._refusal

    @message.setter
    def message(self, value: str) -> None:
        if not hasattr(self, "_refusal"):  # set once, by __init__; the server's rewrite is dropped
            self._refusal = value


def check_request(texts: list) -> None:
    """Refuse, before any work, a request over the row or character limits."""
    rows, max_rows = len(texts), positive_int_env(MAX_ROWS_ENV, MAX_ROWS)
    if rows > max_rows:
        raise UserError(f"the request has {rows} rows; the limit is {max_rows} per request "
                         f"({MAX_ROWS_ENV}): send smaller batches.")
    chars = sum(len(t) for t in texts if isinstance(t, str))
    max_chars = positive_int_env(MAX_CHARS_ENV, MAX_CHARS)
    if chars > max_chars:
        raise UserError(f"the request has {chars} characters of text; the limit is {max_chars} "
                         f"per request ({MAX_CHARS_ENV}): send smaller batches.")


def texts_of(model_input) -> list[str]:
    if isinstance(model_input, pd.DataFrame):
        if TEXT_COLUMN not in model_input.columns:
            # the count, not the names: a column name is the client's text
            raise UserError(f"the input's {len(model_input.columns)} columns include no "
                             f"{TEXT_COLUMN!r} column; send one column named {TEXT_COLUMN!r}.")
        return model_input[TEXT_COLUMN].tolist()
    if isinstance(model_input, pd.Series):
        return model_input.tolist()
    return list(model_input)


class TextClassifier(mlflow.pyfunc.PythonModel):
    predictor: TextPredictor

    def load_context(self, context) -> None:
        # the one loader, as predict and --table load: the folder's recorded review (model_config
        # for a PyTorch model evaluate logged); torch and the model load only for a PyTorch one
        from textclf.inference.loading import folder_predictor

        folder = context.artifacts[served_artifact(context.artifacts)]
        self.predictor = folder_predictor(folder, logged=context.model_config)

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        # the DataFrame hint: a `text` column, validated against the logged signature
        try:
            texts = texts_of(model_input)
            if os.environ.get(TABLE_ENV) == "1":
                return table_answers(texts, self.predictor)
            check_request(texts)
            return self.predictor.predict(texts)
        except UserError as err:
            # an MlflowException: the server answers 400 with this message, and no stack
            # trace with the server's file paths
            raise RequestRefused(str(err)) from None


def check_review(export_dir: str | Path, review: dict | None) -> dict | None:
    """-> the review an export folder records (None: one exported before exports carried it),
    refused in one line where it is not `review` (serve.* changed since the export)."""
    recorded = read_export(export_dir).get("review")
    if review is not None and recorded is not None and review != recorded:
        raise UserError(f"{export_dir} records the review {recorded}, not serve.*'s {review}: "
                        "rerun `dvc repro export`.")
    return recorded


def pinned_requirements(names: tuple[str, ...] = REQUIREMENTS) -> list[str]:
    """name==version for each requirement, without a local version label: torch 2.13.0+cpu
    is pinned as torch==2.13.0, which a package index can serve (the CPU or CUDA build is
    the index's choice, not the version's)."""
    return [f"{name}=={importlib.metadata.version(name).split('+')[0]}" for name in names]


def log_pyfunc(model_dir: str | Path, examples: list[str], export_dir: str | Path | None = None,
               into: tuple[str, str] | None = None, tags: dict[str, str] | None = None,
               review: dict | None = None):
    """Log the model folder (or, given export_dir, the exported ONNX model) as a pyfunc
    under the active run, or `into` (experiment id, run id) -> mlflow ModelInfo. Into a
    finished run (evaluate logs the export) without reopening it: its status and end time
    stay training's, and MLflow's current experiment is left alone. The model answers with
    the review its folder records (export.json's); `review` ({coverage, review_below}:
    serve.*) goes into the pyfunc's model_config only for a folder that records none (a
    PyTorch model folder), and must equal what the folder records."""
    from mlflow.models import Model

    from textclf.inference.loading import folder_predictor

    folder = Path(model_dir if export_dir is None else export_dir)
    recorded = None if export_dir is None else check_review(folder, review)
    config = review if recorded is None else None  # one record of the decisions, not two
    predictor: TextPredictor = folder_predictor(folder, logged=config)
    meta = None if export_dir is None else read_export(folder)
    onnx = meta is not None and meta["format"] != "torch"  # else a PyTorch model, alone or in a blended export
    name, requirements = ("model_onnx", ONNX_REQUIREMENTS) if onnx else ("model", REQUIREMENTS)
    if meta is not None and meta.get(BLEND_KEY):  # the baseline's features and weights too
        requirements += BLEND_REQUIREMENTS
    artifacts = {"model_dir" if meta is None else "onnx_dir" if onnx else "export_dir": str(folder)}
    example = pd.DataFrame({TEXT_COLUMN: examples})
    signature = infer_signature(example, predictor.predict(examples))
    where: dict = {"tags": tags}
    if into:  # the logged model made in the run's experiment, so no current experiment is set
        experiment_id, run_id = into
        model = mlflow.initialize_logged_model(name=name, source_run_id=run_id, tags=tags,
                                               experiment_id=experiment_id)
        where = {"run_id": run_id, "model_id": model.model_id}
    return Model.log(artifact_path=None, name=name, flavor=mlflow.pyfunc, **where,
                     python_model=str(PACKAGE / "inference" / "pyfunc_entry.py"),
                     artifacts=artifacts, code_paths=[str(PACKAGE)], signature=signature,
                     input_example=example, pip_requirements=pinned_requirements(requirements),
                     model_config=config, metadata={TABLE_MODE: 1},
                     flavor_name="pyfunc.ModelFromCode")  # what mlflow.pyfunc.log_model records
