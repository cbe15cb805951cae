#!/usr/bin/env python3
"""Interleaved rounds on one GPU: ctitan and its peers, A B C ... A B C ..., under a deadline.

scripts/gpu_check.sh's `rounds` step (docs/gpu.md). Every configuration of a
round runs once, in a fixed order, as its own process; then the next round.
A configuration that would not finish before the deadline (its last duration,
or a first guess) is skipped and recorded as such, so a short window still
ends with whole evidence for what did run. Per run, the raw files are kept
small but whole under OUT/evidence/<config>-r<round>/: ctitan's summary.json,
metrics.jsonl and env.json, a peer's full JSON (its per-step losses and
tokens/s), the last 80 lines of each log. OUT/rounds.tsv has one row per run;
OUT/rounds.md the medians over rounds, their spread (min–max), and every ratio
taken within a round (paired), then its median and min–max over rounds.

  gpu_rounds.py --out OUT --bin CTITAN --python PY --root SRC --rounds 3 --deadline EPOCH
                [--configs a,b,...] [--rehearse] [--mirror-tar FILE]

--rehearse: the CPU at toy sizes (debugmodel, seq 128, 4 steps); TorchTitan's
peer runs its --check (no GPU: no training). --mirror-tar rewrites FILE (a
.tgz of evidence/, rounds.tsv and rounds.md) after every run, so what ran
comes back even when the whole command is stopped at its limit.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

# name: (kind, extra arguments, first guess of its seconds on an H200)
F8 = ["--model.converters", "quantize.linear.float8", "--quantize.linear.float8.filter_fqns", "output",
      "--quantize.linear.float8.recipe_name"]
CONFIGS = {
    "ct_compile": ("ctitan", ["--compile.enable"], 25),
    "tt_compile": ("torchtitan", ["--mode", "compile"], 90),
    "ct_eager": ("ctitan", [], 25),
    "tt_eager": ("torchtitan", ["--mode", "eager"], 45),
    "py_compile": ("llama_peer", ["--mode", "compile"], 60),
    "ct_f8_tensorwise": ("ctitan", ["--compile.enable", *F8, "tensorwise"], 25),
    "tt_f8_tensorwise": ("torchtitan", ["--mode", "compile", "--float8", "tensorwise"], 100),
    "ct_f8_rowwise": ("ctitan", ["--compile.enable", *F8, "rowwise"], 25),
    "tt_f8_rowwise": ("torchtitan", ["--mode", "compile", "--float8", "rowwise"], 100),
    "py_eager": ("llama_peer", ["--mode", "eager"], 30),
}
DEFAULT = [k for k in CONFIGS if k != "py_eager"]
LABELS = {
    "ct_compile": "ctitan compile", "tt_compile": "TorchTitan compile", "ct_eager": "ctitan eager",
    "tt_eager": "TorchTitan eager", "py_compile": "PyTorch peer, step compiled (model+loss)",
    "ct_f8_tensorwise": "ctitan compile + Float8 tensorwise", "tt_f8_tensorwise": "TorchTitan compile + Float8 tensorwise",
    "ct_f8_rowwise": "ctitan compile + Float8 rowwise", "tt_f8_rowwise": "TorchTitan compile + Float8 rowwise",
    "py_eager": "PyTorch peer, eager",
}
# (numerator, denominator): each taken within a round
RATIOS = [
    ("ct_compile", "ct_eager"), ("ct_compile", "tt_compile"), ("ct_compile", "py_compile"),
    ("ct_eager", "tt_eager"), ("tt_compile", "tt_eager"),
    ("ct_f8_tensorwise", "ct_compile"), ("ct_f8_rowwise", "ct_compile"),
    ("tt_f8_tensorwise", "tt_compile"), ("tt_f8_rowwise", "tt_compile"),
    ("ct_f8_tensorwise", "tt_f8_tensorwise"), ("ct_f8_rowwise", "tt_f8_rowwise"),
    ("py_compile", "py_eager"),
]


class Shapes:
    def __init__(self, rehearse: bool):
        self.rehearse = rehearse
        if rehearse:
            self.device, self.steps, self.warmup, self.seq, self.batch = "cpu", 4, 1, 128, 1
        else:
            self.device, self.steps, self.warmup, self.seq, self.batch = "cuda", 20, 5, 2048, 2


def command(name: str, a, sh: Shapes, run_dir: str) -> list[str]:
    kind, extra, _ = CONFIGS[name]
    if kind == "ctitan":
        model = (["--job.config_file", f"{a.root}/recipes/llama3_debugmodel.toml"] if sh.rehearse else
                 ["--job.config_file", f"{a.root}/recipes/llama3_8b.toml", "--model.n_layers", "4"])
        return [a.bin, "train", *model, "--activation_checkpoint.mode", "none", "--training.device", sh.device,
                "--training.steps", str(sh.steps), "--training.seq_len", str(sh.seq),
                "--training.local_batch_size", str(sh.batch), "--metrics.log_freq", str(sh.warmup),
                "--metrics.warmup_steps", str(sh.warmup), "--job.dump_folder", run_dir, *extra]
    shape = ["--seq-len", str(sh.seq), "--batch", str(sh.batch), "--steps", str(sh.steps), "--warmup", str(sh.warmup)]
    if kind == "llama_peer":
        flavor = ["--flavor", "debugmodel"] if sh.rehearse else ["--flavor", "8B", "--n-layers", "4"]
        return [a.python, f"{a.root}/tests/peer/llama_peer.py", "--device", sh.device, "--dtype", "bf16",
                *flavor, *shape, "--json", *extra]
    flavor = ["--flavor", "debugmodel"] if sh.rehearse else ["--flavor", "8B", "--n-layers", "4"]
    return [a.python, f"{a.root}/tests/peer/torchtitan_peer.py", *flavor, *shape, "--json",
            "--work", os.path.join(run_dir, "work"), "--log", os.path.join(run_dir, "torchtitan.log"),
            *(["--check"] if sh.rehearse else []), *extra]


def tail(path: str, n: int = 80) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def last_json(text: str) -> dict:
    for line in reversed(text.strip().splitlines()):
        try:
            v = json.loads(line)
            if isinstance(v, dict):
                return v
        except ValueError:
            continue
    return {}


def run_one(name: str, rnd: int, a, sh: Shapes, timeout: float) -> dict:
    kind = CONFIGS[name][0]
    run_dir = os.path.join(a.out, "runs", f"{name}-r{rnd}")
    ev = os.path.join(a.out, "evidence", f"{name}-r{rnd}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    os.makedirs(ev, exist_ok=True)
    cmd = command(name, a, sh, run_dir)
    log = os.path.join(run_dir, "log.txt")
    t0 = time.time()
    try:
        with open(log, "w") as f:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=f, text=True, timeout=timeout, cwd=a.root)
        rc, stdout = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as e:
        rc, stdout = 124, (e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
    secs = time.time() - t0
    with open(os.path.join(ev, "command.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")
    with open(os.path.join(ev, "log_tail.txt"), "w") as f:
        f.write(tail(log) + ("\n--- stdout (last 40 lines) ---\n" + "\n".join(stdout.splitlines()[-40:]) if kind == "ctitan" else ""))
    row = {"round": rnd, "config": name, "exit": rc, "seconds": round(secs, 1), "tps_median": None,
           "mfu_pct": None, "peak_active_gib": None, "peak_reserved_gib": None, "final_loss": None}
    if kind == "ctitan":
        for f in ("summary.json", "metrics.jsonl", "env.json"):
            if os.path.exists(os.path.join(run_dir, f)):
                shutil.copy(os.path.join(run_dir, f), ev)
        try:
            s = json.load(open(os.path.join(run_dir, "summary.json")))
        except (OSError, ValueError):
            s = {}
        last = {}
        try:
            lines = [ln for ln in open(os.path.join(run_dir, "metrics.jsonl")) if ln.strip()]
            last = json.loads(lines[-1]) if lines else {}
        except (OSError, ValueError):
            pass
        row.update(tps_median=s.get("tps_median"), mfu_pct=s.get("mfu"),
                   peak_active_gib=gib(s.get("mem_peak_bytes")),
                   peak_reserved_gib=gib(last.get("mem_reserved_peak_bytes")), final_loss=last.get("loss"))
    else:
        peer = last_json(stdout)
        with open(os.path.join(ev, "peer.json"), "w") as f:
            json.dump(peer, f, indent=1)
        if os.path.exists(os.path.join(run_dir, "torchtitan.log")):
            with open(os.path.join(ev, "log_tail.txt"), "a") as f:
                f.write("\n--- torchtitan.log (last 80 lines) ---\n" + tail(os.path.join(run_dir, "torchtitan.log")))
        row.update(tps_median=peer.get("tps_median"), mfu_pct=peer.get("mfu_pct_median"),
                   peak_active_gib=gib(peer.get("max_active_bytes") or peer.get("max_active_bytes_last_step")),
                   peak_reserved_gib=gib(peer.get("max_reserved_bytes")), final_loss=peer.get("final_loss"))
        if sh.rehearse and peer.get("check") == "ok":
            row["checked"] = True
    shutil.rmtree(run_dir, ignore_errors=True)  # traces and TorchTitan's work folder: not evidence
    return row


def gib(b):
    return round(b / 2**30, 2) if isinstance(b, (int, float)) else None


def spread(xs: list[float]) -> str:
    if not xs:
        return ""
    m = statistics.median(xs)
    return f"{min(xs):,.0f}–{max(xs):,.0f} ({100 * (max(xs) - min(xs)) / m:.1f} %)" if len(xs) > 1 else "one round"


def write_summary(a, rows: list[dict], sh: Shapes) -> None:
    with open(os.path.join(a.out, "rounds.tsv"), "w") as f:
        keys = ["round", "config", "exit", "seconds", "tps_median", "mfu_pct", "peak_active_gib",
                "peak_reserved_gib", "final_loss"]
        f.write("\t".join(keys) + "\n")
        for r in rows:
            f.write("\t".join("" if r.get(k) is None else str(r.get(k)) for k in keys) + "\n")
    ok = [r for r in rows if r["exit"] == 0 and r.get("tps_median")]
    by = {}
    for r in ok:
        by.setdefault(r["config"], {})[r["round"]] = r
    lines = ["# Interleaved rounds\n"]
    if sh.rehearse:
        lines.append("**A rehearsal on the CPU at toy sizes: none of these numbers is a GPU measurement.**\n")
    lines.append(f"Shapes: {'debugmodel, seq 128 × batch 1' if sh.rehearse else 'Llama 3 8B shapes, 4 layers, seq 2048 × batch 2'}, "
                 f"{sh.steps} steps, the first {sh.warmup} not counted; no activation checkpointing. Each round runs every "
                 "configuration once, in the order below, each as its own process.\n")
    lines.append("| configuration | rounds | tokens/s median | min–max (spread) | MFU % | peak active GiB | peak reserved GiB | final loss |")
    lines.append("|---|---:|---:|---|---:|---:|---:|---:|")
    for name in a.configs:
        rs = list(by.get(name, {}).values())
        failed = [r for r in rows if r["config"] == name and r not in ok]
        if not rs:
            why = ", ".join(f"r{r['round']}: " + (f"exit {r['exit']}" if isinstance(r["exit"], int) else r["exit"])
                            for r in failed) or "not run"
            lines.append(f"| {LABELS[name]} | 0 | | {why} | | | | |")
            continue
        tps = [r["tps_median"] for r in rs]
        med = lambda k: statistics.median([r[k] for r in rs if r.get(k) is not None]) if any(r.get(k) is not None for r in rs) else None  # noqa: E731
        fmt = lambda v, f: "" if v is None else format(v, f)  # noqa: E731
        lines.append(f"| {LABELS[name]} | {len(rs)} | {statistics.median(tps):,.0f} | {spread(tps)} | "
                     f"{fmt(med('mfu_pct'), '.1f')} | {fmt(med('peak_active_gib'), '.2f')} | "
                     f"{fmt(med('peak_reserved_gib'), '.2f')} | {fmt(med('final_loss'), '.4f')} |")
    lines.append("\n## Ratios, paired within each round\n")
    lines.append("| ratio | rounds | median | min–max | per round |\n|---|---:|---:|---|---|")
    for num, den in RATIOS:
        pairs = [(k, by[num][k]["tps_median"] / by[den][k]["tps_median"])
                 for k in sorted(by.get(num, {})) if k in by.get(den, {})]
        if not pairs:
            continue
        vals = [v for _, v in pairs]
        lines.append(f"| {LABELS[num]} / {LABELS[den]} | {len(vals)} | ×{statistics.median(vals):.3f} | "
                     f"×{min(vals):.3f}–×{max(vals):.3f} | {' '.join(f'r{k}: ×{v:.3f}' for k, v in pairs)} |")
    skipped = [r for r in rows if r["exit"] == "skipped"]
    if skipped:
        names = ", ".join(f"{r['config']} r{r['round']}" for r in skipped)
        lines.append(f"\nSkipped for the deadline: {names}.")
    with open(os.path.join(a.out, "rounds.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def mirror(a) -> None:
    if not a.mirror_tar:
        return
    tmp = a.mirror_tar + ".tmp"
    with tarfile.open(tmp, "w:gz") as t:
        for p in ("evidence", "rounds.tsv", "rounds.md"):
            if os.path.exists(os.path.join(a.out, p)):
                t.add(os.path.join(a.out, p), arcname=p)
    os.replace(tmp, a.mirror_tar)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--deadline", type=float, required=True, help="seconds since the epoch")
    ap.add_argument("--configs", default=",".join(DEFAULT))
    ap.add_argument("--rehearse", action="store_true")
    ap.add_argument("--mirror-tar", default=None)
    a = ap.parse_args()
    a.configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in a.configs if c not in CONFIGS]
    if unknown:
        print(f"gpu_rounds: unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    if a.rounds < 1:
        print("gpu_rounds: --rounds must be at least 1", file=sys.stderr)
        return 2
    sh = Shapes(a.rehearse)
    os.makedirs(os.path.join(a.out, "evidence"), exist_ok=True)
    last = {}
    rows = []
    t_start = time.time()
    for rnd in range(1, a.rounds + 1):
        for name in a.configs:
            failed = [r for r in rows if r["config"] == name and r["exit"] not in (0, "skipped", "not repeated")]
            if failed:  # a configuration that failed once is not repeated: the window is short
                rows.append({"round": rnd, "config": name, "exit": "not repeated", "seconds": 0})
                print(f"[rounds {time.time() - t_start:4.0f}s] r{rnd} {name}: not repeated, it failed in "
                      f"r{failed[0]['round']} (exit {failed[0]['exit']})", flush=True)
                continue
            guess = last.get(name, CONFIGS[name][2] * (3 if sh.rehearse else 1))
            left = a.deadline - time.time()
            if left < guess + 5:
                rows.append({"round": rnd, "config": name, "exit": "skipped", "seconds": 0})
                print(f"[rounds {time.time() - t_start:4.0f}s] r{rnd} {name}: skipped, {left:.0f}s left, it takes ~{guess:.0f}s",
                      flush=True)
                continue
            row = run_one(name, rnd, a, sh, timeout=min(max(3 * guess, 60), left - 2))
            last[name] = row["seconds"]
            rows.append(row)
            tps = f"{row['tps_median']:,.0f} tokens/s" if row.get("tps_median") else ("checked" if row.get("checked") else "no tokens/s")
            print(f"[rounds {time.time() - t_start:4.0f}s] r{rnd} {name}: exit {row['exit']} in {row['seconds']:.0f}s, {tps}",
                  flush=True)
            write_summary(a, rows, sh)
            mirror(a)
    write_summary(a, rows, sh)
    mirror(a)
    print(open(os.path.join(a.out, "rounds.md")).read())
    bad = [r for r in rows if r["exit"] not in (0, "skipped", "not repeated")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
