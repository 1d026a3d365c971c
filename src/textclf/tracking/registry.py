"""The model registry: each evaluated training becomes a version of one registered model,
`challenger` names the newest, and `champion` the best eligible version: no guard alarm,
the highest test macro-F1 among the versions tested on the champion's test split. A version
tested on another split (another data version) is judged by the caller's `challenge`, which
scores both models on common documents (evaluate.champion). Every move of `champion` is
kept on the registered model (HISTORY_TAG) and on the version it moved to. A version whose
silent_class guard warned (classes it never recalls on validation) may become champion (a
warning, not an alarm; macro-F1, the gate's score, counts each such class as 0), but never
without a word: the decision's reason and log line name its silent classes. Of one training
run's versions (the same model logged again with other serving settings: serve.format,
coverage, review_below) only the last evaluated competes: it answers as params.yaml now says,
and takes the champion's place when the champion is that run.

    python -m textclf.predict models:/textclf@champion article.txt
    mlflow models serve -m models:/textclf@champion --env-manager local
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Callable

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from textclf.severity import ALARM, with_severity
from textclf.tracking.runs import conflict_safe

log = logging.getLogger(__name__)
CHALLENGER, CHAMPION = "challenger", "champion"
SPLIT_TAG = "test_split_hash"
# A hash made before labels were part of it (before 2026-12) is a bare md5: it never equals a
# prefixed one, so a version that carries it counts as tested on another split.
SPLIT_HASH_PREFIX = "labels-md5:"
MAX_ROUNDS = 20
HISTORY_TAG, HISTORY_KEPT, WHY_CHARS = "champion_history", 20, 240
SILENT_TAG, SILENT_NAMED = "silent_classes", 10  # a JSON list; the decision names the first 10
EVALUATED_TAG = "evaluated_at"  # when an evaluate last registered or refreshed the version (unix seconds)


def split_hash(documents) -> str:
    """One hash for a test split: md5 over its sorted (content hash, label) pairs, so two
    versions are compared only on the very same test documents with the same ground truth
    (a relabelled document or two merged classes make another split)."""
    pairs = sorted([str(content), str(label)] for content, label in documents)
    return SPLIT_HASH_PREFIX + hashlib.md5(json.dumps(pairs).encode()).hexdigest()


def alarms(tags: dict[str, str]) -> list[str]:
    """The guards whose status, on a version's tags, is an alarm (textclf.severity)."""
    return with_severity({k.removeprefix("guard."): v for k, v in tags.items() if k.startswith("guard.")},
                         ALARM)


def _latest_of_each_run(versions: list[dict]) -> list[dict]:
    """Of the versions of one training run ("run_id"), the last evaluated (EVALUATED_TAG,
    then the version number): the others are the same model with earlier serving settings."""
    def when(v: dict) -> tuple[float, int]:
        return float(v.get(EVALUATED_TAG) or 0), int(v["version"])
    latest: dict[str, dict] = {}
    for v in versions:
        key = v.get("run_id") or f"version {v['version']}"
        if key not in latest or when(v) > when(latest[key]):
            latest[key] = v
    return list(latest.values())


def best_version(versions: list[dict], test_split: str) -> dict | None:
    """The champion by definition: of the versions (tags plus "version" and "run_id") tested
    on this split and free of guard alarms, the last evaluated of each training run, the
    highest test macro-F1; a tie goes to the newest version."""
    eligible = [v for v in _latest_of_each_run(versions) if v.get(SPLIT_TAG) == test_split
                and "test_macro_f1" in v and not alarms(v)]
    return max(eligible, key=lambda v: (float(v["test_macro_f1"]), int(v["version"])), default=None)


def version_tags(metrics: dict, test_split: str, commit: str, exp_name: str | None) -> dict[str, str]:
    """What a version carries: commit, experiment, test split, scores and every guard. The
    scores are the served model's: a blended export's are the blend's (serve.blend), so the gate
    ranks what each version answers."""
    served = metrics.get("blend") or metrics
    gap = served["accuracy"] - metrics["baseline"]["accuracy"] if "blend" in metrics else metrics["gap"]["accuracy"]
    tags = {"git_commit": commit, SPLIT_TAG: test_split,
            "test_accuracy": f"{served['accuracy']:.6f}", "test_macro_f1": f"{served['macro_f1']:.6f}",
            "gap_accuracy": f"{gap:+.6f}",
            **{f"guard.{k}": v for k, v in metrics["guards"].items()}}
    if exp_name:
        tags["dvc.exp_name"] = exp_name
    silent = [c["class"] for c in metrics.get("silent_classes") or []]
    if silent:
        tags[SILENT_TAG] = json.dumps(silent, ensure_ascii=False)
    return tags


def silent_note(tags: dict[str, str]) -> str:
    """What the decision says of a version whose silent_class guard warned, or ""."""
    if tags.get("guard.silent_class") != "warn":
        return ""
    names = json.loads(tags.get(SILENT_TAG) or "[]")
    more = f" and {len(names) - SILENT_NAMED} more" if len(names) > SILENT_NAMED else ""
    return (f"silent_class warned: it never recalls {len(names)} class(es) on validation "
            f"({', '.join(names[:SILENT_NAMED])}{more})")


def _champion(client: MlflowClient, name: str) -> dict | None:
    try:
        mv = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        return None
    return {**mv.tags, "version": mv.version, "run_id": mv.run_id}


def current_champion(tracking_uri: str, name: str) -> dict | None:
    """The champion's tags, version and run id, or None (no champion, or no such model)."""
    return _champion(MlflowClient(tracking_uri), name)


def run_file(tracking_uri: str, run_id: str, path: str) -> str | None:
    """A local copy of artifact `path` of a run, or None where the run has none."""
    try:
        return mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path,
                                                   tracking_uri=tracking_uri)
    except (MlflowException, OSError):
        return None


def history(client: MlflowClient, name: str) -> list[dict]:
    """The champion's moves, oldest first: {from, to, when, why}."""
    return json.loads(client.get_registered_model(name).tags.get(HISTORY_TAG) or "[]")


def _record_move(client: MlflowClient, name: str, old: dict | None, new: dict, why: str) -> None:
    """One move of `champion`, on the registered model (the last HISTORY_KEPT) and on the
    version it moved to (which keeps it if two evaluates append at once)."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    move = {"from": int(old["version"]) if old else None, "to": int(new["version"]), "when": when,
            "why": why[:WHY_CHARS]}
    moves = (history(client, name) + [move])[-HISTORY_KEPT:]
    conflict_safe(client.set_registered_model_tag, name, HISTORY_TAG, json.dumps(moves))
    for key in ("from", "when", "why"):
        client.set_model_version_tag(name, new["version"], f"champion.{key}", str(move[key]))


def _versions(client: MlflowClient, name: str) -> list[dict]:
    return [{**mv.tags, "version": mv.version, "run_id": mv.run_id}
            for mv in client.search_model_versions(f"name = '{name}'")]


def settle_champion(client: MlflowClient, name: str, test_split: str) -> dict | None:
    """Point `champion` at best_version, then read the versions again and repeat until the
    alias agrees with them. Two evaluates may interleave anyhow: whichever writes the alias
    last has read, after its write, every version registered before it, so the alias ends on
    the best of them (a plain read-compare-write could end on the worse one)."""
    for _ in range(MAX_ROUNDS):
        best = best_version(_versions(client, name), test_split)
        if best is None:
            return None
        conflict_safe(client.set_registered_model_alias, name, CHAMPION, best["version"])
        again = best_version(_versions(client, name), test_split)
        if again is not None and again["version"] == best["version"]:
            return best
    raise RuntimeError(f"the champion of {name} did not settle in {MAX_ROUNDS} rounds: versions "
                       "keep arriving; run the evaluate again when they stop.")


def why(version: dict, best: dict | None, champion: dict | None, test_split: str) -> str:
    """The gate's decision about `version`, in words."""
    by_hand = "Promote by hand if meant: MlflowClient().set_registered_model_alias(name, 'champion', version)"
    if champion is not None and not str(champion.get(SPLIT_TAG)).startswith(SPLIT_HASH_PREFIX):
        return (f"the champion (version {champion['version']}) carries a test-split hash made without "
                f"labels (before 2026-12): its ground truth cannot be compared, so it counts as another "
                f"test split. {by_hand}")
    if champion is not None and champion.get(SPLIT_TAG) != test_split:
        return (f"the champion (version {champion['version']}) was tested on another test split; "
                f"macro-F1 on different documents does not compare. {by_hand}")
    if alarms(version):
        return f"guard alarms: {', '.join(alarms(version))}"
    if best is None:
        return "no eligible version on this test split"
    f1, top = float(version["test_macro_f1"]), float(best["test_macro_f1"])
    if best["version"] == version["version"]:
        if champion is not None and champion["version"] != version["version"] and \
                champion.get("run_id") == version.get("run_id"):
            return (f"the same training run as version {champion['version']} (the champion), evaluated "
                    "again with other serving settings (serve.*): it takes its place")
        return f"test macro-F1 {f1:.4f}: the best of the eligible versions on this test split"
    if f1 == top:
        return (f"test macro-F1 {f1:.4f}, equal to version {best['version']}'s: a tie goes to the newer "
                "version, which stays champion on this test split")
    digits = 4 if f"{f1:.4f}" != f"{top:.4f}" else 6  # never "<" between two equal figures
    return f"test macro-F1 {f1:.{digits}f} < version {best['version']}'s {top:.{digits}f} on this test split"


def add_version(run: dict, name: str, tags: dict[str, str]) -> tuple[MlflowClient, str]:
    """Register the run's served model (once per run and model: an evaluate rerun reuses its
    version and refreshes its tags; one that serves another format, another logged model,
    gets a version of its own) and point `challenger` at it -> (client, version)."""
    mlflow.set_tracking_uri(run["tracking_uri"])
    client = MlflowClient(run["tracking_uri"])
    existing = [v for v in client.search_model_versions(f"name = '{name}' and run_id = '{run['run_id']}'")
                if v.source == run["model_uri"]]
    tags = {**tags, EVALUATED_TAG: f"{time.time():.6f}"}  # this run's settings are now these
    if existing:
        version = existing[0].version
        for key, value in tags.items():
            client.set_model_version_tag(name, version, key, value)
    else:
        version = mlflow.register_model(run["model_uri"], name, tags=tags).version
    # a new model's first aliases: two evaluates (`dvc queue start -j 2`) may insert them at once
    conflict_safe(client.set_registered_model_alias, name, CHALLENGER, version)
    return client, version


Judge = Callable[[dict], "dict | None"]  # the champion's tags -> the comparison, or None


def _across_splits(client: MlflowClient, name: str, version: str, tags: dict, champion: dict,
                   challenge: Judge | None) -> tuple[str, dict | None]:
    """A champion tested on another split: the caller's comparison on common documents
    decides -> (reason, comparison); without one (or for a champion that cannot be
    compared) the champion stays."""
    comparison = challenge(champion) if challenge else None
    if comparison is None:
        return why({**tags, "version": version}, None, champion, tags[SPLIT_TAG]), None
    for key, value in comparison.get("tags", {}).items():
        client.set_model_version_tag(name, version, key, str(value))
    reason = comparison["reason"]
    if comparison["promote"] and alarms(tags):
        reason = f"guard alarms: {', '.join(alarms(tags))} ({reason})"
    elif comparison["promote"]:
        conflict_safe(client.set_registered_model_alias, name, CHAMPION, version)
    return reason, comparison


def champion_words(decision: dict) -> str:
    """Where `register`'s decision left the champion, in words."""
    if decision["promoted"]:
        return "champion is it"
    return f"champion stays at version {decision['champion']}" if decision["champion"] else "no champion yet"


def register(run: dict, name: str, tags: dict[str, str], challenge: Judge | None = None) -> dict:
    """add_version, then move `champion`: among the versions tested on the champion's own
    split, to the best eligible one; a version tested on another split, by `challenge`
    -> the decision (with the comparison, if one was made, and the last moves)."""
    client, version = add_version(run, name, tags)
    champion, split = _champion(client, name), tags[SPLIT_TAG]
    comparison = None
    if champion is not None and champion.get(SPLIT_TAG) != split:
        reason, comparison = _across_splits(client, name, version, tags, champion, challenge)
    else:
        best = settle_champion(client, name, split)
        reason = why({**tags, "version": version, "run_id": run["run_id"]}, best, champion, split)
    silent = silent_note(tags)
    reason += f"; {silent}" if silent else ""
    current = _champion(client, name)
    if current is not None and (champion is None or current["version"] != champion["version"]):
        _record_move(client, name, champion, current, reason if current["version"] == version else
                     "the best eligible version on its test split")
    promoted = current is not None and current["version"] == version
    decision = {"model": name, "version": int(version), "promoted": promoted, "reason": reason,
                "champion": int(current["version"]) if current else None,
                "champion_comparison": comparison, "history": history(client, name)[-5:]}
    log.log(logging.WARNING if silent else logging.INFO, "registered %s version %s (challenger); %s: %s",
            name, version, champion_words(decision), reason)
    return decision
