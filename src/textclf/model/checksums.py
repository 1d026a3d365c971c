"""Checksums of a saved model folder (checksums.json: each file's size and sha256), written
where a folder is saved (modeling.save_model, export.export_model) and checked before any of
its files is parsed (modeling.load_classifier, inference.onnx_predictor), so that every
predictor, the pyfunc included, refuses a damaged file in one line. hashlib only: the ONNX
predictor imports it without torch."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path, PurePosixPath
from typing import Iterable

from textclf.errors import UserError
from textclf.files import read_json, write_json
from textclf.model.exported import EXPORT_FILE

log = logging.getLogger(__name__)
CHECKSUM_FILE = "checksums.json"
# sha256 rather than md5: hashlib's sha256 runs on the CPU's SHA instructions, 2.4 times md5's
# speed here (docs/benchmarks/serving.md#model-checksums-2026-12-03); the threat is damage, not forgery
ALGORITHM = "sha256"
_unverified: set[str] = set()  # folders without checksums already warned about (once per process)
# What model loaders read by name (transformers' config and tokenizer files, safetensors
# weights, calibration.json, ONNX files): such a file the list lacks is refused, as it could
# change every answer; a README or an editor's backup beside the model is not.
LOADER_SUFFIXES = frozenset({".json", ".safetensors", ".onnx", ".txt", ".model", ".jinja"})


def file_digest(path: Path, algorithm: str = ALGORITHM) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, algorithm).hexdigest()


def write_checksums(folder: str | Path) -> None:
    """Every file under `folder` -> its checksums.json. Called last, on the complete folder."""
    folder = Path(folder)
    files = {p.relative_to(folder).as_posix(): [p.stat().st_size, file_digest(p)]
             for p in sorted(folder.rglob("*")) if p.is_file() and p != folder / CHECKSUM_FILE}
    write_json(folder / CHECKSUM_FILE, {"algorithm": ALGORITHM, "files": files})


def how_to_restore(folder: Path, exported: bool) -> str:
    """What a user does about a damaged folder: a logged MLflow model's copy (its MLmodel sits
    above the artifact folder) is fetched again; a pipeline output is restored or rebuilt, by
    commands that run as printed: `--force`, as DVC will not overwrite a changed file without
    it, and from the project's root when this process runs outside the project."""
    resolved = folder.resolve()
    if any((up / "MLmodel").is_file() for up in resolved.parents[:2]):
        return ("download the MLflow model again (delete this copy); if the tracking store's copy "
                "is damaged too, train and log a new one (`dvc repro -f train`)")
    root = next((up for up in resolved.parents if (up / ".dvc").is_dir()), None)
    if root is None:
        return ("this folder is not in a DVC project, so DVC cannot restore it: copy it again from "
                "where it came from (or log the model to MLflow and use its URI)")
    if not _dvc_tracked(root, resolved.relative_to(root)):
        return (f"DVC does not track this folder ({root}'s dvc.lock has no such output), so it cannot "
                "restore it: copy it again from where it came from (models/export, models/model)")
    cwd = Path.cwd().resolve()
    cd, target = ("", folder) if cwd == root or root in cwd.parents else \
        (f"cd {root} && ", resolved.relative_to(root))
    if exported:
        return (f"rerun `{cd}dvc repro export`, or restore the saved one with "
                f"`{cd}dvc checkout --force {target}`")
    return f"restore it with `{cd}dvc checkout --force {target}`, or retrain it with `{cd}dvc repro train`"


def _dvc_tracked(root: Path, rel: Path) -> bool:
    """Is `rel` (a folder under the DVC project `root`) an output, or inside one, of a stage
    in dvc.lock or of a .dvc file: what `dvc checkout` restores."""
    import yaml  # here: a verified load never reads it

    try:
        stages = (yaml.safe_load((root / "dvc.lock").read_text()) or {}).get("stages", {})
    except (OSError, yaml.YAMLError, AttributeError):
        stages = {}
    outs = {PurePosixPath(o["path"]) for s in stages.values() for o in s.get("outs", [])}
    here = PurePosixPath(rel.as_posix())
    return any(p in outs or (root / f"{p}.dvc").is_file() for p in [here, *here.parents][:-1])


def _saved(folder: Path) -> tuple[str, list[tuple[str, int, str]]]:
    """checksums.json -> (algorithm, [(file, size, digest)]), in one line when unreadable."""
    path = folder / CHECKSUM_FILE
    try:
        saved = read_json(path)
        algorithm, files = str(saved["algorithm"]), saved["files"]
        hashlib.new(algorithm)
        listed = [(str(name), int(size), str(digest)) for name, (size, digest) in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(f"{path} is unreadable ({type(err).__name__}), so the model folder cannot "
                        f"be verified: {how_to_restore(folder, (folder / EXPORT_FILE).exists())}.") from None
    for name, _, _ in listed:
        if PurePosixPath(name).is_absolute() or ".." in PurePosixPath(name).parts:
            raise UserError(f"{path} lists {name!r}, outside the model folder: "
                            f"{how_to_restore(folder, (folder / EXPORT_FILE).exists())}.")
    return algorithm, listed


def verify_folder(folder: str | Path, names: Iterable[str] | None = None) -> None:
    """The files `names` of `folder` (by default every file checksums.json lists) are there, of
    the size and digest it lists; else one UserError naming the file and the fix. A loader names
    the files it reads: a name the folder lacks and the list does not hold is left to the loader
    to refuse. A folder without checksums.json (saved before folders carried them: a registered
    model may be) loads with a warning that it cannot be verified, as it loaded before."""
    folder = Path(folder)
    if not (folder / CHECKSUM_FILE).is_file():
        if folder.is_dir() and str(folder.resolve()) not in _unverified:  # else the loader says what it is not
            _unverified.add(str(folder.resolve()))
            log.warning("%s has no %s (saved before model folders carried checksums): its files "
                        "cannot be verified; saving it again (train or export) adds one", folder, CHECKSUM_FILE)
        return
    algorithm, listed = _saved(folder)
    def fix() -> str:  # only for a refusal: it may read the project's dvc.lock
        return how_to_restore(folder, any(name == EXPORT_FILE for name, _, _ in listed))
    asked = {name for name, _, _ in listed} if names is None else set(names)
    if names is None:  # the whole folder is loaded: a file a loader would read, listed or refused
        asked |= {p.name for p in folder.iterdir() if p.is_file() and p.suffix in LOADER_SUFFIXES
                  and p.name != CHECKSUM_FILE}
    for name in asked - {name for name, _, _ in listed}:
        if (folder / name).exists():
            raise UserError(f"{folder / name} is not among the files {CHECKSUM_FILE} lists (it came "
                            f"after the folder was saved, and loading would read it): remove it; "
                            f"else {fix()}.")
    wanted = [entry for entry in listed if entry[0] in asked]
    for name, size, _ in wanted:  # the sizes first: a missing or cut-short file reads nothing
        path = folder / name
        if not path.is_file():
            raise UserError(f"{path} is missing ({CHECKSUM_FILE} lists it): the model folder is "
                            f"incomplete; {fix()}.")
        if path.stat().st_size != size:
            raise UserError(f"{path} has {path.stat().st_size} bytes, {size} were saved: the model "
                            f"folder is damaged; {fix()}.")
    for name, _, digest in wanted:
        if file_digest(folder / name, algorithm) != digest:
            raise UserError(f"{folder / name} is not the file that was saved (its {algorithm} differs "
                            f"from {CHECKSUM_FILE}'s): the model folder is damaged; {fix()}.")
