#!/usr/bin/env python3
"""Out-of-sample check of `ctitan plan --profile`: every ok run of a results
database predicted twice — with the hardware spec as shipped, and with the
efficiencies one profiled run's traced ops imply — against its measured
tokens/s per device.

    scripts/validate_plan_profile.py RESULTS.db PROFILED_RUN_DIR [FURTHER_RUN_DIR ...]
        [--ctitan build/ctitan] [--hardware cpu]

PROFILED_RUN_DIR is a single-process run (its compute, unit by unit). Each
FURTHER_RUN_DIR, optional, is either a single process of the same model at
another batch size (the size curve of each class) or a multi-rank run (how
much ranks slow each other, and what collectives cost inside a training
step, on this machine). A database run of a multi-rank calibration run's
recipe and world size is left out: it is in sample.
scripts/plan_validation.sh makes the runs and calls this.
"""
import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile


def same_recipe(config_toml, ws, run_dir):
    """Whether a database run is the side-by-side calibration run's recipe:
    its world size and its model, batch and parallel settings."""
    import tomllib
    try:
        with open(os.path.join(run_dir, "config.toml"), "rb") as f:
            cal = tomllib.load(f)
        with open(os.path.join(run_dir, "summary.json")) as f:
            cal_ws = json.load(f).get("world_size", 1)
    except (OSError, ValueError):
        return False
    run = tomllib.loads(config_toml)
    if cal_ws != ws:
        return False
    for section in ("model", "parallelism", "activation_checkpoint", "compile"):
        if cal.get(section) != run.get(section):
            return False
    keys = ("local_batch_size", "seq_len", "mixed_precision_param")
    return all(cal["training"].get(k) == run["training"].get(k) for k in keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("run_dir")
    ap.add_argument("further_dirs", nargs="*")
    ap.add_argument("--ctitan", default=os.path.join(os.path.dirname(__file__), "..", "build", "ctitan"))
    ap.add_argument("--hardware", default="cpu")
    a = ap.parse_args()
    rows = sqlite3.connect(a.db).execute(
        "select r.id, r.label, r.world_size, r.config_toml, s.tps_median from runs r "
        "join summaries s on s.run_id = r.id where r.status = 'ok' and s.tps_median > 0").fetchall()
    if not rows:
        sys.exit(f"{a.db}: no ok run with a measured tokens/s; run a sweep into it first")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for rid, label, ws, cfg, tps in rows:
            path = os.path.join(tmp, f"{rid}.toml")
            with open(path, "w") as f:
                f.write(cfg)

            def predict(extra):
                p = subprocess.run([a.ctitan, "plan", path, "--hardware", a.hardware, "--ngpu", str(ws), "--json"] + extra,
                                   capture_output=True, text=True)
                if p.returncode:
                    sys.exit(f"ctitan plan failed for {label}: {p.stderr.strip()}")
                return json.loads(p.stdout)["tps_per_device"]

            profile = ["--profile", a.run_dir]
            for d in a.further_dirs:
                profile += ["--profile", d]
            if any(same_recipe(cfg, ws, d) for d in a.further_dirs):
                print(f"{label} (ws {ws}): a calibration run's own recipe, left out", file=sys.stderr)
                continue
            out.append((ws, label, tps, predict([]), predict(profile)))
            print(f"{len(out)}/{len(rows)} predicted", file=sys.stderr)
    print("| ws | point | measured tps | spec as shipped | measured ops |")
    print("|---:|---|---:|---:|---:|")
    for ws, label, t, s, m in sorted(out):
        print(f"| {ws} | {label} | {t:,.0f} | {s:,.0f} ({s / t - 1:+.0%}) | {m:,.0f} ({m / t - 1:+.0%}) |")
    for name, k in (("spec as shipped", 3), ("measured ops", 4)):
        errs = [abs(r[k] / r[2] - 1) for r in out]
        print(f"{name}: median |error| {100 * statistics.median(errs):.1f} %, worst {100 * max(errs):.1f} % over {len(out)} runs")


if __name__ == "__main__":
    main()
