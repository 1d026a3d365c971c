"""The trained classifier as an MLflow pyfunc model, for every head.

Input: a DataFrame with a `text` column (or a list of strings). Output: a DataFrame with
`label`, `probability` and `prob_<class>` per class. The model folder (safetensors +
tokenizer + params.json) is an artifact, and this package ships with the model
(`code_paths`), so `mlflow models predict/serve --env-manager local` needs nothing else.
"""

import importlib.metadata
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.models import infer_signature

import textclf

TEXT_COLUMN = "text"
PACKAGE = Path(textclf.__file__).parent
# What loading the model needs; the versions are the ones it was logged with.
REQUIREMENTS = ("torch", "transformers", "accelerate", "safetensors", "pandas", "numpy",
                "scikit-learn", "pyyaml", "mlflow")


def texts_of(model_input) -> list[str]:
    if isinstance(model_input, pd.DataFrame):
        if TEXT_COLUMN not in model_input.columns:
            raise ValueError(f"input columns {list(model_input.columns)} have no "
                             f"{TEXT_COLUMN!r} column; send one column named {TEXT_COLUMN!r}.")
        return model_input[TEXT_COLUMN].tolist()
    if isinstance(model_input, pd.Series):
        return model_input.tolist()
    return list(model_input)


class TextClassifier(mlflow.pyfunc.PythonModel):
    def load_context(self, context) -> None:
        from textclf.predict import Predictor  # torch and the model load only here
        self.predictor = Predictor(context.artifacts["model_dir"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        # the DataFrame hint: a `text` column, validated against the logged signature
        return self.predictor.predict(texts_of(model_input))


def pinned_requirements() -> list[str]:
    return [f"{name}=={importlib.metadata.version(name)}" for name in REQUIREMENTS]


def log_pyfunc(model_dir: str | Path, examples: list[str]):
    """Log the model folder as a pyfunc under the active run -> mlflow ModelInfo."""
    from textclf.predict import Predictor
    example = pd.DataFrame({TEXT_COLUMN: examples})
    signature = infer_signature(example, Predictor(model_dir).predict(examples))
    return mlflow.pyfunc.log_model(
        name="model", python_model=str(PACKAGE / "pyfunc_entry.py"),
        artifacts={"model_dir": str(model_dir)},
        code_paths=[str(PACKAGE)], signature=signature,
        input_example=example, pip_requirements=pinned_requirements())
