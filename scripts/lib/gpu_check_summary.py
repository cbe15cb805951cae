#!/usr/bin/env python3
"""summary.md of a scripts/gpu_check.sh run: the steps (state, time, budget),
ctitan beside eager PyTorch and torch.compile on the same GPU and shapes, the
CUPTI tracer's cost, and where each number came from.

  gpu_check_summary.py OUT
"""
import glob
import json
import os
import sys

out = sys.argv[1]


def load(path):
    """A JSON file, or the last line of one (the peers print step lines before their summary)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    for candidate in (text, text.splitlines()[-1] if text else ""):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    return None


def gib(b):
    return f"{b / 2**30:.2f}" if isinstance(b, (int, float)) else ""


def num(x, fmt):
    return format(x, fmt) if isinstance(x, (int, float)) else ""


inventory = open(os.path.join(out, "inventory.log")).read().strip() if os.path.exists(os.path.join(out, "inventory.log")) else ""
steps = [line.rstrip("\n").split("\t") for line in open(os.path.join(out, "steps.tsv"))]
total = sum(int(s[2]) for s in steps)

print("# GPU check\n")
if os.environ.get("rehearse") == "1":
    print("**A rehearsal (`--rehearse`): every step ran on the CPU at toy sizes to check the script's "
          "wiring. None of these numbers is a GPU measurement.**\n")
else:
    print("Written by `scripts/gpu_check.sh`; every figure below was measured in this run.\n")
print("```\n" + inventory + "\n```\n")
deadline = int(os.environ.get("deadline_s", "530")) * (4 if os.environ.get("rehearse") == "1" else 1)
if os.path.exists(os.path.join(out, "commit.txt")):
    print(f"Commit: `{open(os.path.join(out, 'commit.txt')).read().strip()}` (the prebuilt binaries' and, "
          "every tracked file checked, this tree's).\n")
print(f"## Steps ({total} s in all; deadline {deadline} s)\n")
print("| step | state | seconds | budget | last line |\n|---|---|---:|---:|---|")
for name, state, secs, budget, why in (s + [""] * (5 - len(s)) for s in steps):
    print(f"| {name} | {state} | {secs} | {budget} | {why.replace('|', '/')} |")

def last_metrics(run_dir):
    """The last line of a ctitan run's metrics.jsonl (the allocator's reserved peak is there)."""
    try:
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            lines = [line for line in f if line.strip()]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, ValueError):
        return {}


rows = []
timing = []
tps_of = {}
for d in sorted(glob.glob(os.path.join(out, "runs", "*", "summary.json"))):
    s = load(d) or {}
    run = os.path.dirname(d)
    name = os.path.basename(run)
    tps_of[f"ctitan {name}"] = s.get("tps_median")
    rows.append((f"ctitan {name}", s.get("tps_median"), s.get("mfu"), s.get("mem_peak_bytes"),
                 last_metrics(run).get("mem_reserved_peak_bytes"), s.get("exposed_comm_s"),
                 s.get("comm_source", "")))
    if s.get("step_time_median_s") and s.get("step_s_traced"):
        timing.append((name, s["step_time_median_s"], s["step_s_traced"], s.get("techniques", "")))
for p in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    s = load(p) or {}
    tps_of[os.path.basename(p)[:-5].replace("_", " ", 1)] = s.get("tps_median")
    rows.append((os.path.basename(p)[:-5].replace("_", " ", 1), s.get("tps_median"), None,
                 s.get("max_active_bytes"), s.get("max_reserved_bytes"), None, s.get("torch_version", "")))
shapes = "toy sizes on the CPU" if os.environ.get("rehearse") == "1" else "bf16, 20 steps, the first 5 not counted"
print(f"\n## Throughput and memory ({shapes})\n")
print("| run | tokens/s | MFU % | peak active GiB | peak reserved GiB | exposed comm s/step | comm source / torch |")
print("|---|---:|---:|---:|---:|---:|---|")
for name, tps, mfu, act, res, exp, src in rows:
    print(f"| {name} | {num(tps, ',.0f')} | {num(mfu, '.1f')} | {gib(act)} | {gib(res)} | {num(exp, '.4f')} | {src} |")

if timing:
    print("\n## Step time: CUDA events against the CUPTI timeline\n")
    print("| run | events s/step (median) | CUPTI s/step (mean) | difference | techniques |\n|---|---:|---:|---:|---|")
    for name, ev, tr, tech in timing:
        print(f"| {name} | {ev:.4f} | {tr:.4f} | {100.0 * (tr / ev - 1.0):+.1f} % | {tech} |")

ratios = []
for model in ("125M", "8B_4L", "moe"):
    base, comp = tps_of.get(f"ctitan {model}"), tps_of.get(f"ctitan {model}_compile")
    for label, other in (("ctitan eager", base), ("eager PyTorch", tps_of.get(f"eager {model}")),
                         ("torch.compile", tps_of.get(f"compile {model}"))):
        if comp and other:
            ratios.append((model, label, comp / other))
if ratios:
    print("\n## ctitan with compile.enable (its fused CUDA kernels), tokens/s over\n")
    print("| model | over | ratio |\n|---|---|---:|")
    for model, label, r in ratios:
        print(f"| {model} | {label} | ×{r:.3f} |")

for log in sorted(glob.glob(os.path.join(out, "kernels_*.log"))):
    text = open(log).read()
    table = text[text.find("GPU time of the traced step"):] if "GPU time of the traced step" in text else ""
    if table:
        print(f"\n## Where the GPU time goes: {os.path.basename(log)[8:-4]}\n\n{table.strip()}")

with_cupti = load(os.path.join(out, "runs", "125M", "summary.json")) or {}
without = load(os.path.join(out, "runs", "125M_no_cupti", "summary.json")) or {}
if with_cupti.get("tps_median") and without.get("tps_median"):
    cost = 100.0 * (without["tps_median"] / with_cupti["tps_median"] - 1.0)
    print(f"\nCUPTI tracer's cost per step (125M, tokens/s without it over with it): {cost:+.1f} %")
if os.path.exists(os.path.join(out, "rounds.md")):
    print("\n" + open(os.path.join(out, "rounds.md")).read().replace("# Interleaved rounds", "## Interleaved rounds", 1)
          .replace("\n## Ratios", "\n### Ratios"))
if os.path.exists(os.path.join(out, "report.md")):
    print(f"\nThe one-point sweep's report: report.md ({os.path.getsize(os.path.join(out, 'report.md'))} bytes); "
          "its SQLite database: gpu.db.")
