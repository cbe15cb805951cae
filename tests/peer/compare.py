#!/usr/bin/env python3
"""Side-by-side throughput: ctitan vs the same Llama 3 in eager PyTorch and
torch.compile (tests/peer/llama_peer.py), on this machine, in one run.

Runs are interleaved (ctitan, eager, compile, ctitan, eager, ...) so machine
drift spreads over all three; each run reports its steady-state median
tokens/s (warm-up steps excluded) and the table gives the median over repeats
and the ratio to eager PyTorch.

  .venv/bin/python tests/peer/compare.py --flavor debugmodel --repeats 3
  .venv/bin/python tests/peer/compare.py --flavor 125M --steps 12 --warmup 4 --repeats 2 --no-compile
(--no-compile skips both compile columns: ctitan's fused kernels and torch.compile)

Two ctitan builds against each other (a restructure must not cost speed):
  .venv/bin/python tests/peer/compare.py --baseline /tmp/old/build/ctitan --no-peer --no-compile
adds a "ctitan baseline" runner, interleaved with the others; --no-peer drops
the PyTorch runners and the ratio column is then against the baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_ctitan(binary: Path, a: argparse.Namespace, extra: list[str] = ()) -> dict:
    with tempfile.TemporaryDirectory() as dump:
        cmd = [str(binary), "train", "--model.flavor", a.flavor, "--training.seq_len", str(a.seq_len),
               "--training.local_batch_size", str(a.batch), "--training.steps", str(a.steps),
               "--metrics.warmup_steps", str(a.warmup), "--metrics.log_freq", str(a.steps),
               "--lr_scheduler.warmup_steps", "2", "--training.mixed_precision_param",
               "bfloat16" if a.dtype == "bf16" else "float32", "--job.dump_folder", dump, *extra]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        s = json.loads((Path(dump) / "summary.json").read_text())
        return {"tps": s["tps_median"], "mfu": s.get("mfu"), "loss": s["loss_final"]}


def run_peer(mode: str, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(ROOT / "tests/peer/llama_peer.py"), "--flavor", a.flavor, "--mode", mode,
           "--dtype", a.dtype, "--seq-len", str(a.seq_len), "--batch", str(a.batch), "--steps", str(a.steps),
           "--warmup", str(a.warmup), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])
    return {"tps": s["tps_median"], "mfu": None, "loss": s["final_loss"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flavor", default="debugmodel")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    ap.add_argument("--ctitan", type=Path, default=ROOT / "build" / "ctitan")
    ap.add_argument("--baseline", type=Path, help="another ctitan binary, run interleaved as 'ctitan baseline'")
    ap.add_argument("--no-peer", action="store_true", help="skip the PyTorch runners (eager and torch.compile)")
    a = ap.parse_args()

    runners = {"ctitan": lambda: run_ctitan(a.ctitan, a)}
    if a.baseline:
        runners["ctitan baseline"] = lambda: run_ctitan(a.baseline, a)
    if not a.no_peer:
        runners["pytorch eager"] = lambda: run_peer("eager", a)
    if not a.no_compile:
        runners["ctitan compile"] = lambda: run_ctitan(a.ctitan, a, ["--compile.enable"])
        if a.baseline:
            runners["baseline compile"] = lambda: run_ctitan(a.baseline, a, ["--compile.enable"])
        if not a.no_peer:
            runners["torch.compile"] = lambda: run_peer("compile", a)
    reference = "pytorch eager" if "pytorch eager" in runners else "ctitan baseline" if a.baseline else "ctitan"
    results: dict[str, list[dict]] = {k: [] for k in runners}
    for rep in range(a.repeats):
        for name, fn in runners.items():
            r = fn()
            results[name].append(r)
            print(f"[compare] repeat {rep + 1}/{a.repeats} {name:16s} tps {r['tps']:10.1f}", file=sys.stderr)

    ref = statistics.median(r["tps"] for r in results[reference])
    print(f"\n{a.flavor} {a.dtype} seq {a.seq_len} x batch {a.batch}, {a.steps} steps "
          f"({a.warmup} warm-up excluded), {a.repeats} interleaved repeats, {os.cpu_count()} cores\n")
    print(f"| runner | tokens/s (median) | min–max | vs {reference} |")
    print("|---|---:|---:|---:|")
    for name, rs in results.items():
        tps = [r["tps"] for r in rs]
        med = statistics.median(tps)
        print(f"| {name} | {med:,.0f} | {min(tps):,.0f}–{max(tps):,.0f} | {med / ref:.3f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
