"""The model registry: each evaluated training becomes a version of one registered model,
`challenger` names the newest, and `champion` moves only through the promotion gate.

    python -m textclf.predict models:/textclf@champion article.txt
    mlflow models serve -m models:/textclf@champion --env-manager local
"""
from __future__ import annotations

import hashlib
import logging

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)
CHALLENGER, CHAMPION = "challenger", "champion"
SPLIT_TAG = "test_split_hash"


def split_hash(content_hashes) -> str:
    """One hash for a test split: md5 over its documents' sorted content hashes, so two
    versions are compared only on the very same test documents."""
    return hashlib.md5("\n".join(sorted(content_hashes)).encode()).hexdigest()


def promotion(new: dict, champion: dict | None) -> tuple[bool, str]:
    """The gate, on version tags -> (promote?, why). Every guard must pass, and the new
    macro-F1 must be at least the champion's on the same test split."""
    failed = sorted(k.removeprefix("guard.") for k, v in new.items() if k.startswith("guard.") and v != "pass")
    if failed:
        return False, f"guards not passed: {', '.join(failed)}"
    if champion is None:
        return True, "first version that passes every guard"
    if champion.get(SPLIT_TAG) != new[SPLIT_TAG]:
        return False, (f"the champion (version {champion['version']}) was tested on another test split; "
                       "macro-F1 on different documents does not compare. Promote by hand if meant: "
                       "MlflowClient().set_registered_model_alias(name, 'champion', version)")
    new_f1, old_f1 = float(new["test_macro_f1"]), float(champion["test_macro_f1"])
    if new_f1 >= old_f1:
        return True, f"test macro-F1 {new_f1:.4f} >= champion version {champion['version']}'s {old_f1:.4f}"
    return False, f"test macro-F1 {new_f1:.4f} < champion version {champion['version']}'s {old_f1:.4f}"


def version_tags(metrics: dict, test_split: str, commit: str, exp_name: str | None) -> dict[str, str]:
    """What a version carries: commit, experiment, test split, scores and every guard."""
    tags = {"git_commit": commit, SPLIT_TAG: test_split,
            "test_accuracy": f"{metrics['accuracy']:.6f}", "test_macro_f1": f"{metrics['macro_f1']:.6f}",
            "gap_accuracy": f"{metrics['gap']['accuracy']:+.6f}",
            **{f"guard.{k}": v for k, v in metrics["guards"].items()}}
    if exp_name:
        tags["dvc.exp_name"] = exp_name
    return tags


def _champion(client: MlflowClient, name: str) -> dict | None:
    try:
        mv = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None
    return {**mv.tags, "version": mv.version}


def register(run: dict, name: str, tags: dict[str, str]) -> dict:
    """Register the run's logged model (once per run: an evaluate rerun reuses its version),
    point `challenger` at it, and move `champion` if the gate lets it -> the decision."""
    mlflow.set_tracking_uri(run["tracking_uri"])
    client = MlflowClient(run["tracking_uri"])
    existing = client.search_model_versions(f"name = '{name}' and run_id = '{run['run_id']}'")
    if existing:
        version = existing[0].version
        for key, value in tags.items():
            client.set_model_version_tag(name, version, key, value)
    else:
        version = mlflow.register_model(run["model_uri"], name, tags=tags).version
    client.set_registered_model_alias(name, CHALLENGER, version)
    champion = _champion(client, name)
    if champion is not None and champion["version"] == version:  # an evaluate rerun
        promote, why = True, "already the champion"
    else:
        promote, why = promotion(tags, champion)
    if promote:
        client.set_registered_model_alias(name, CHAMPION, version)
    current = _champion(client, name)
    decision = {"model": name, "version": int(version), "promoted": promote, "reason": why,
                "champion": int(current["version"]) if current else None}
    log.info("registered %s version %s (challenger); champion %s: %s", name, version,
             "moved to it" if promote else "stays", why)
    return decision
