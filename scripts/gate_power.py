#!/usr/bin/env python3
"""The paired gate's power curve on this machine (docs/reports.md, "Power").

A pool of interleaved A/B pairs per condition, each run by the real gate
(`ctitan gate --run SPEC --candidate-override debug.step_slowdown=S`: the
candidate sleeps S of each step's own work after it, so every step is S
slower on any machine; S = 0 is an A/A comparison of the same recipe). Then
trials: for each number of pairs K, TRIALS draws of K distinct pairs from the
pool (seeded), each judged by the real gate (`ctitan gate --paired`) on a copy
of the pool's database holding only those pairs. A detection is exit 1
(regression); for S = 0 that is a false alarm.

The trials share pairs (K of POOL each), so the rates estimate what the
gate does with pairs like the pool's; a pool of POOL independent pairs is
what was measured.

    scripts/gate_power.py [--out DIR] [--pool 20] [--trials 20] [--sizes 3,6,10]
                          [--slowdowns 0,0.05,0.1,0.2] [--bin build/ctitan]
                          [--spec recipes/sweeps/gate_debugmodel.toml] [--seed 1]
                          [--judge-only]

Progress goes to stderr, the table (Markdown) to stdout and OUT/power.md,
every decision to OUT/power.json. --judge-only re-judges pools an earlier
call left in OUT.
"""
import argparse
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time

EXIT_NAMES = {0: "pass", 1: "regression", 3: "inconclusive"}


def fail(msg):
    print(f"gate_power: {msg}", file=sys.stderr)
    sys.exit(2)


def run_pool(args, slowdown, db):
    cmd = [args.bin, "gate", "--run", args.spec, "--db", db, "--pairs", str(args.pool), "--seed", str(args.seed),
           "--candidate-override", f"debug.step_slowdown={slowdown}"]
    t0 = time.time()
    with open(db + ".log", "w") as log:
        rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    print(f"gate_power: pool slowdown={slowdown}: {args.pool} pairs in {time.time() - t0:.0f}s (gate exit {rc})",
          file=sys.stderr)
    if rc not in EXIT_NAMES:
        fail(f"`{' '.join(cmd)}` exited {rc}; see {db}.log")


def pool_repeats(db):
    """The repeats both sides ran ok (the pool's pairs)."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT s.name, r.repeat FROM runs r JOIN sweeps s ON s.id = r.sweep_id "
                       "WHERE r.status = 'ok'").fetchall()
    con.close()
    sides = {}
    for name, rep in rows:
        sides.setdefault(name, set()).add(rep)
    if len(sides) != 2:
        fail(f"{db} holds {len(sides)} sweeps with ok runs, not a baseline and a candidate")
    return sorted(set.intersection(*sides.values())), sorted(sides)


def wilcoxon_p(d):
    """Two-sided exact p of Wilcoxon's signed-rank test on d (zeros dropped;
    ties take their mid-ranks, counted exactly in half-ranks)."""
    d = [x for x in d if x != 0]
    n = len(d)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(d[i]))
    twice_rank = [0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(d[order[j + 1]]) == abs(d[order[i]]):
            j += 1
        for k in range(i, j + 1):
            twice_rank[order[k]] = i + j + 2  # 2 x the mid-rank of positions i..j (1-based)
        i = j + 1
    w_plus = sum(r for r, x in zip(twice_rank, d) if x > 0)
    total = sum(twice_rank)
    counts = {0: 1}  # distribution of the sum of a random subset of the ranks
    for r in twice_rank:
        nxt = dict(counts)
        for v, c in counts.items():
            nxt[v + r] = nxt.get(v + r, 0) + c
        counts = nxt
    tail = min(w_plus, total - w_plus)
    p = 2 * sum(c for v, c in counts.items() if v <= tail) / 2 ** n
    return min(1.0, p)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def step_tps(db, repeats, warmup):
    """(side, repeat) -> {step: tps} of each ok run, rank 0's logged steps."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT s.name, r.repeat, st.step, st.tps FROM steps st JOIN runs r ON r.id = st.run_id "
                       "JOIN sweeps s ON s.id = r.sweep_id WHERE r.status = 'ok' AND st.rank = 0 "
                       "AND st.tps IS NOT NULL").fetchall()
    con.close()
    out = {}
    for name, rep, step, tps in rows:
        if rep in repeats:
            out.setdefault(("candidate" if name.endswith("-candidate") else "baseline", rep), {})[step] = tps
    return out


def other_rules(db, keep, warmup, threshold=0.05, alpha=0.05):
    """What two other ways of pairing the same runs would decide (regression
    or not): every steady step paired with the same step of the other side's
    run ("by step"), and each run's median over all its steps, warm-up
    included ("with warm-up")."""
    t = step_tps(db, set(keep), warmup)
    by_step, with_warmup = [], []
    for rep in keep:
        b, c = t.get(("baseline", rep), {}), t.get(("candidate", rep), {})
        steps = sorted(set(b) & set(c))
        by_step += [math.log(c[s] / b[s]) for s in steps if s > warmup]
        if steps:
            with_warmup.append(math.log(median([c[s] for s in steps]) / median([b[s] for s in steps])))

    def regression(d):
        return bool(d) and math.exp(median(d)) - 1 < -threshold and wilcoxon_p(d) <= alpha
    return {"by_step": regression(by_step), "with_warmup": regression(with_warmup)}


def judge(args, db, keep, workdir):
    trial = os.path.join(workdir, "trial.db")
    shutil.copyfile(db, trial)
    con = sqlite3.connect(trial)
    con.execute("PRAGMA foreign_keys = ON")
    marks = ",".join("?" * len(keep))
    con.execute(f"DELETE FROM runs WHERE repeat NOT IN ({marks})", keep)
    con.commit()
    con.close()
    names = pool_repeats(db)[1]
    base = [n for n in names if n.endswith("-baseline")]
    cand = [n for n in names if n.endswith("-candidate")]
    if not base or not cand:
        fail(f"{db}: expected sweeps named *-baseline and *-candidate, found {names}")
    r = subprocess.run([args.bin, "gate", "--paired", "--db", trial, "--baseline", f"sweep:{base[0]}",
                        "--candidate", f"sweep:{cand[0]}", "--format", "json"], capture_output=True, text=True)
    if r.returncode not in EXIT_NAMES:
        fail(f"gate --paired exited {r.returncode} on {trial}: {r.stderr.strip()}")
    change = None
    try:
        for point in json.loads(r.stdout).get("points", []):
            for c in point.get("metrics", []):
                if c.get("metric") == "tps":
                    change = c.get("change")
    except json.JSONDecodeError:
        pass
    return r.returncode, change


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="/tmp/gate_power")
    ap.add_argument("--pool", type=int, default=20)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--sizes", default="3,6,10")
    ap.add_argument("--slowdowns", default="0,0.05,0.1,0.2")
    ap.add_argument("--bin", default="build/ctitan")
    ap.add_argument("--spec", default="recipes/sweeps/gate_debugmodel.toml")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--warmup", type=int, default=2, help="the spec's warm-up steps (steps after it are steady)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    slowdowns = [float(x) for x in args.slowdowns.split(",")]
    if any(k < 1 or k > args.pool for k in sizes):
        fail(f"--sizes {args.sizes}: each must be 1..--pool ({args.pool})")
    if not os.access(args.bin, os.X_OK):
        fail(f"--bin {args.bin} is not an executable ctitan; build it or pass its path")
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    results = []
    for s in slowdowns:
        db = os.path.join(args.out, f"pool_{s:g}.db")
        if not args.judge_only:
            if os.path.exists(db):
                os.remove(db)
            run_pool(args, s, db)
        elif not os.path.exists(db):
            fail(f"--judge-only: {db} is missing; run without --judge-only first")
        repeats, _ = pool_repeats(db)
        for k in sizes:
            if len(repeats) < k:
                fail(f"{db} has {len(repeats)} complete pairs, fewer than {k}")
            for t in range(args.trials):
                keep = sorted(rng.sample(repeats, k))
                rc, change = judge(args, db, keep, args.out)
                results.append({"slowdown": s, "pairs": k, "trial": t, "repeats": keep, "exit": rc,
                                "verdict": EXIT_NAMES[rc], "tps_change": change,
                                "other_rules": other_rules(db, keep, args.warmup)})
            hits = sum(1 for r in results if r["slowdown"] == s and r["pairs"] == k and r["exit"] == 1)
            print(f"gate_power: slowdown={s:g} pairs={k}: {hits} of {args.trials} regressions", file=sys.stderr)
    with open(os.path.join(args.out, "power.json"), "w") as f:
        json.dump({"pool": args.pool, "trials": args.trials, "spec": args.spec, "seed": args.seed,
                   "results": results}, f, indent=1)
    lines = ["| candidate | " + " | ".join(f"{k} pairs" for k in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for s in slowdowns:
        cells = []
        for k in sizes:
            rs = [r for r in results if r["slowdown"] == s and r["pairs"] == k]
            reg = sum(r["exit"] == 1 for r in rs)
            inc = sum(r["exit"] == 3 for r in rs)
            cells.append(f"{reg}/{len(rs)}" + (f" ({inc} inconclusive)" if inc else ""))
        name = "A/A (false alarms)" if s == 0 else f"{100 * s:g} % slower (detected)"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "The same trials judged two other ways (regressions; computed here, not by the gate):", "",
              "| candidate | rule | " + " | ".join(f"{k} pairs" for k in sizes) + " |",
              "|---|---|" + "---:|" * len(sizes)]
    for s in slowdowns:
        for rule, what in (("by_step", "steady steps paired by step"), ("with_warmup", "run medians with warm-up")):
            cells = []
            for k in sizes:
                rs = [r for r in results if r["slowdown"] == s and r["pairs"] == k]
                cells.append(f"{sum(r['other_rules'][rule] for r in rs)}/{len(rs)}")
            name = "A/A" if s == 0 else f"{100 * s:g} % slower"
            lines.append(f"| {name} | {what} | " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "power.md"), "w") as f:
        f.write(table)
    sys.stdout.write(table)


if __name__ == "__main__":
    main()
