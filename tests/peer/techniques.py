#!/usr/bin/env python3
"""One measured row per training technique, side by side in one run.

Runs `ctitan train` on the same recipe with each technique switched on in
turn (interleaved repeats, so machine drift spreads over all rows) and prints
tokens/s, peak tensor memory and final loss against the plain recipe.

  .venv/bin/python tests/peer/techniques.py --flavor debugmodel --repeats 2
  .venv/bin/python tests/peer/techniques.py --flavor 125M --steps 10 --warmup 4 --repeats 1
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TECHNIQUES = {
    "plain": [],
    "AC full": ["--activation_checkpoint.mode", "full"],
    "AC selective 2": ["--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "2"],
    "AC selective op": ["--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option", "op"],
    "compile": ["--compile.enable"],
    "float8 tensorwise (emulated)": ["--model.converters", "quantize.linear.float8"],
    "float8 rowwise (emulated)": ["--model.converters", "quantize.linear.float8",
                                  "--quantize.linear.float8.recipe_name", "rowwise"],
}


def run(binary: Path, a: argparse.Namespace, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as dump:
        cmd = [str(binary), "train", "--model.flavor", a.flavor, "--training.seq_len", str(a.seq_len),
               "--training.local_batch_size", str(a.batch), "--training.steps", str(a.steps),
               "--training.dataset", a.dataset, "--metrics.warmup_steps", str(a.warmup),
               "--metrics.log_freq", str(a.steps), "--lr_scheduler.warmup_steps", "2",
               "--job.dump_folder", dump, *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        return json.loads((Path(dump) / "summary.json").read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flavor", default="debugmodel")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--dataset", default="markov")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ctitan", type=Path, default=ROOT / "build" / "ctitan")
    a = ap.parse_args()

    rows: dict[str, list[dict]] = {k: [] for k in TECHNIQUES}
    for rep in range(a.repeats):
        for name, extra in TECHNIQUES.items():
            s = run(a.ctitan, a, extra)
            rows[name].append(s)
            print(f"[techniques] repeat {rep + 1}/{a.repeats} {name:28s} tps {s['tps_median']:9.1f}", file=sys.stderr)

    base_tps = statistics.median(s["tps_median"] for s in rows["plain"])
    base_mem = statistics.median(s["mem_peak_bytes"] for s in rows["plain"])
    print(f"\n{a.flavor} bf16 seq {a.seq_len} x batch {a.batch}, {a.dataset} data, {a.steps} steps "
          f"({a.warmup} excluded), {a.repeats} interleaved repeats\n")
    print("| technique | tokens/s | vs plain | peak memory (MiB) | vs plain | final loss |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, ss in rows.items():
        tps = statistics.median(s["tps_median"] for s in ss)
        mem = statistics.median(s["mem_peak_bytes"] for s in ss)
        loss = ss[-1]["loss_final"]
        print(f"| {name} | {tps:,.0f} | {tps / base_tps:.2f}× | {mem / 2**20:,.0f} | {mem / base_mem:.2f}× | {loss:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
