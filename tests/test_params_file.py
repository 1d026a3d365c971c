"""A refusal names the params file actually read: --params another.yaml (every stage, the
sweep and its space), a model folder's params.json (predict, serve, evaluate), not params.yaml."""
import json

import pytest

from textclf.errors import UserError
from textclf.config import load_params
from textclf.model.modeling import folder_params

from conftest import write_params


@pytest.mark.parametrize("sections, message", [
    ({"train": {"epochs": -1}}, "{f}: train.epochs=-1 is out of range: it must be >= 0; set it in {f} or"),
    ({"train": {"optimizer": "sgd"}}, "{f}: train.optimizer='sgd' must be one of"),
    ({"trian": {"epochs": 1}}, "{f}: unknown section 'trian'. Did you mean 'train'?"),
    ({"train": {"epoch": 1}}, "{f}: unknown key train.epoch. Did you mean 'epochs'?"),
])
def test_a_refusal_names_the_params_file_read(tmp_path, sections, message):
    path = write_params(tmp_path / "other.yaml", **sections)
    with pytest.raises(UserError) as err:
        load_params(path)
    assert str(err.value).startswith(message.format(f=path)) and "params.yaml" not in str(err.value)


def test_params_yaml_itself_is_still_called_params_yaml(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_params(tmp_path / "params.yaml", train={"epochs": -1})
    with pytest.raises(UserError, match=r"^params.yaml: train.epochs=-1 .* set it in params.yaml or"):
        load_params("params.yaml")


@pytest.mark.parametrize("space, message", [
    ({"train.lr_encodr": {"log_uniform": [1e-6, 1e-2]}}, "{f}: sweep.space names 'train.lr_encodr'"),
    ({"train.lr_encoder": {"log_uniform": [1e-6, 2.0]}}, "{f}: sweep.space.train.lr_encoder may sample"),
    ({"train.lr_encoder": {"range": [1e-6, 2.0]}}, "{f}: sweep.space.train.lr_encoder={{'range'"),
])
def test_a_sweep_refusal_names_the_params_file_read(tmp_path, space, message):
    from textclf.sweep.__main__ import main
    path = write_params(tmp_path / "other.yaml", sweep={"space": space})
    with pytest.raises(UserError) as err:
        main(["--params", str(path)])
    assert str(err.value).startswith(message.format(f=path)) and "params.yaml" not in str(err.value)


def test_a_model_folders_bad_params_json_is_named(tmp_path):
    (tmp_path / "params.json").write_text(json.dumps({"tokenize": {"max_length": 0}, "model": {}}))
    with pytest.raises(UserError) as err:
        folder_params(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'params.json'}: tokenize.max_length=0")
