"""What a sweep found, for people with and without MLflow: reports/sweep.json and sweep.md (every
trial: its params, score or failure, warnings, DVC experiment, whether DVC restored it), and the
study's parent run (the best trial's params and score, whether any trial beat chance, the
summary, Optuna's figures)."""
from __future__ import annotations

import logging
import tempfile
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState

from textclf.files import write_json
from textclf.sweep.chance import beats

log = logging.getLogger(__name__)


def rows(study: optuna.Study) -> list[dict]:
    out, direction = [], study.direction.name.lower()
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.FAIL and "reason" not in t.user_attrs:
            continue  # interrupted, or asked past n_trials: not one of the study's trials
        chance = t.user_attrs.get("chance")
        out.append({"trial": t.number, "experiment": t.user_attrs.get("experiment"), "params": t.params,
                    "state": t.state.name.lower(), "value": t.value, "reason": t.user_attrs.get("reason"),
                    "warnings": t.user_attrs.get("warnings", []), "run_id": t.user_attrs.get("run_id"),
                    "restored_from": t.user_attrs.get("restored_from"), "chance": chance,
                    "beats_chance": beats(t.value, chance, direction) if t.value is not None else None})
    return out


def learned(complete: list[dict]) -> bool | None:
    """Whether some complete trial beat chance: False only when every one's bar is known."""
    if any(r["beats_chance"] for r in complete):
        return True
    return False if complete and all(r["beats_chance"] is False for r in complete) else None


def summary(study: optuna.Study, objective: str) -> dict:
    trials = rows(study)
    complete = [r for r in trials if r["state"] == "complete"]
    best = None
    if complete:
        b = next(r for r in trials if r["trial"] == study.best_trial.number)
        best = {k: b[k] for k in ("trial", "experiment", "params", "value", "run_id", "restored_from",
                                  "chance", "beats_chance")}
    return {"study": study.study_name, "objective": objective, "direction": study.direction.name.lower(),
            "complete": len(complete), "failed": len(trials) - len(complete), "best": best,
            "learned": learned(complete), "trials": trials}


def headline(found: dict) -> str:
    """The sweep's last log line: the counts, the best, and whether it learned anything."""
    b, line = found["best"], f"{found['complete']} trials complete, {found['failed']} failed; best: "
    if not b:
        return line + "none"
    line += f"{b['experiment']} {found['objective']}={b['value']:.4f} {b['params']}"
    if b["restored_from"]:
        line += f" (restored by DVC's run-cache from {b['restored_from']['experiment']})"
    if found["learned"] is False:
        line += (f"; NO TRIAL BEAT CHANCE ({b['chance']['value']:.4f}, {b['chance']['what']}): "
                 "none learned from the texts (reports/sweep.md)")
    return line


def not_learned(found: dict) -> list[str]:
    """sweep.md's warning when no complete trial beat chance."""
    b = found["best"]
    if found["learned"] is not False:
        return []
    return [f"**No complete trial beat chance.** The best scored {found['objective']} {b['value']:.4f}, "
            f"where a predictor that never reads the texts scores {b['chance']['value']:.4f} "
            f"({b['chance']['what']}): nothing here learned from the texts. Look at the trials' guards "
            "(silent_class, collapse), the space's learning rates and train.epochs before taking one.", ""]


def markdown(found: dict) -> str:
    names = sorted({k for r in found["trials"] for k in r["params"]})
    lines = [f"# Sweep {found['study']}", ""]
    if found["best"]:
        b = found["best"]
        restored = b["restored_from"] and (f" Its training was restored by DVC's run-cache from "
                                           f"{b['restored_from']['experiment']}'s (run {b['restored_from']['run_id']}).")
        lines += not_learned(found)
        lines += [f"Best: trial {b['trial']} (`dvc exp apply {b['experiment']} && dvc exp run -S evaluate.register=true`), {found['objective']} "
                  f"{b['value']:.4f}, " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                                      for k, v in b["params"].items()) + "." + (restored or ""), ""]
    else:
        lines += ["No trial completed without a guard alarm.", ""]
    lines += ["| trial | experiment | " + " | ".join(names) + f" | {found['objective']} | guards |",
              "|---|---|" + "---|" * len(names) + "---|---|"]
    for r in found["trials"]:
        values = [f"{r['params'][n]:.3g}" if isinstance(r["params"].get(n), float) else str(r["params"].get(n, ""))
                  for n in names]
        score = f"{r['value']:.4f}" if r["value"] is not None else (r["state"] if not r["reason"] else "failed")
        score += " (below chance)" if r["beats_chance"] is False else ""
        score += f" (restored from {r['restored_from']['experiment']})" if r["restored_from"] else ""
        guards = r["reason"] or ", ".join(r["warnings"]) or "pass"
        lines.append(f"| {r['trial']} | {r['experiment']} | " + " | ".join(values) + f" | {score} | {guards} |")
    return "\n".join(lines) + "\n"


def figures(study: optuna.Study, folder: Path, lr_name: str | None) -> list[Path]:
    """Optuna's optimization history, parameter importances and a slice plot, as PNG files,
    once two trials are complete (what the plots need)."""
    import matplotlib
    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as plots

    made: list[Path] = []
    wanted = {"optimization_history.png": lambda: plots.plot_optimization_history(study),
              "param_importances.png": lambda: plots.plot_param_importances(study),
              "slice.png": lambda: plots.plot_slice(study, params=[lr_name] if lr_name else None)}
    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if complete < 2:
        return made
    for name, draw in wanted.items():
        with warnings.catch_warnings():  # Optuna marks its matplotlib plots experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            axes = draw()
        axes.figure.savefig(folder / name, dpi=100, bbox_inches="tight")
        made.append(folder / name)
    return made


def write(study: optuna.Study, objective: str, out_json: Path, client, parent_id: str) -> dict:
    found = summary(study, objective)
    write_json(out_json, found)
    out_md = out_json.with_suffix(".md")
    out_md.write_text(markdown(found), encoding="utf-8")
    if found["best"]:
        for key, value in found["best"]["params"].items():  # tags: a resumed sweep's best may change
            client.set_tag(parent_id, f"best.{key}", value)
        client.set_tag(parent_id, "best.experiment", found["best"]["experiment"])
        client.set_tag(parent_id, "best.restored_from", (found["best"]["restored_from"] or {}).get("experiment", ""))
        client.log_metric(parent_id, f"best_{objective}", found["best"]["value"])
        if found["best"]["chance"]:
            client.log_metric(parent_id, f"chance_{objective}", found["best"]["chance"]["value"])
        client.set_tag(parent_id, "sweep.learned", {True: "true", False: "false", None: "unknown"}[found["learned"]])
    client.log_metric(parent_id, "trials_complete", found["complete"])
    client.log_metric(parent_id, "trials_failed", found["failed"])
    client.log_artifact(parent_id, str(out_json))
    client.log_artifact(parent_id, str(out_md))
    with tempfile.TemporaryDirectory() as tmp:
        lr = next((n for n in (found["best"] or {}).get("params", {}) if "lr" in n), None)
        for png in figures(study, Path(tmp), lr):
            client.log_artifact(parent_id, str(png), "figures")
    return found

