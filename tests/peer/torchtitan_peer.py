#!/usr/bin/env python3
"""TorchTitan itself as ctitan's peer: its Llama 3 model and trainer, unmodified.

TorchTitan (the PyPI wheel `torchtitan==0.2.2`, with its pinned needs:
scripts/requirements-gpu-peers.txt, carried to a GPU node by
scripts/gpu_peer_wheels.sh) trains on one GPU exactly as `torchtitan/train.py`
does. This wrapper only

  * registers one more Llama 3 flavor, FLAVOR with n_layers replaced
    (`--n-layers 4` on "8B" gives the 8B shapes with 4 layers, as ctitan's
    `--model.n_layers 4`), in TorchTitan's own flavor table;
  * writes what TorchTitan reads from the Hugging Face hub and disk, since a GPU
    node is offline: a WordLevel `tokenizer.json` (word i is token i + 3, under
    the model's 128,256-entry vocabulary, which TorchTitan does not change) and a
    local `c4_test`-style JSON dataset of random words, read through
    `datasets.load_dataset` as TorchTitan's `c4_test` is;
  * starts one rank (RANK=0, WORLD_SIZE=1, a free MASTER_PORT) and TorchTitan's
    `main(Trainer)` with TorchTitan's own command line (tyro), then reads its
    per-step log lines (`--metrics.log_freq 1`, no colour) into one JSON summary
    in the shape of tests/peer/llama_peer.py's (`tps_median`, `losses`, ...).

On one GPU TorchTitan applies no FSDP (data_parallel_shard_degree -1 is 1): its
parameters stay fp32 and it trains under `torch.autocast(bf16)`
(`maybe_enable_amp`). `--mode compile` is its `compile.enable` with
`components = ["model", "loss"]`; `--float8 tensorwise|rowwise` its
`quantize.linear.float8` converter with that `recipe_name` and
`filter_fqns = ["output"]`, as its 8B recipe has.

  python3 tests/peer/torchtitan_peer.py --flavor 8B --n-layers 4 --mode compile \
      --seq-len 2048 --batch 2 --steps 20 --warmup 5 --json

`--check` stops before training: it registers the flavor, parses TorchTitan's
command line, builds the model on the meta device and reads one batch from the
dataset (for a machine without a GPU: the wrapper's own wiring).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

STEP_LINE = re.compile(
    r"step:\s*(\d+)\s+loss:\s*([-\d.naif]+)\s+grad_norm:\s*([-\d.naif]+)\s+memory:\s*([\d.]+)GiB"
    r"\(([\d.]+)%\)\s+tps:\s*([\d,]+)\s+tflops:\s*([\d,.]+)\s+mfu:\s*([\d.]+)%"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
N_WORDS = 32000  # tokenizer words; ids 3 .. N_WORDS + 2 (the model's vocabulary stays 128,256)


def write_assets(folder: str, seed: int, n_docs: int = 400, words_per_doc: int = 1500) -> tuple[str, str]:
    """A WordLevel tokenizer (tokenizer.json + tokenizer_config.json) and a JSON-lines dataset."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    assets = os.path.join(folder, "hf_assets")
    data = os.path.join(folder, "dataset")
    os.makedirs(assets, exist_ok=True)
    os.makedirs(data, exist_ok=True)
    vocab = {"<|begin_of_text|>": 0, "<|end_of_text|>": 1, "<unk>": 2}
    vocab.update({f"w{i}": i + 3 for i in range(N_WORDS)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(os.path.join(assets, "tokenizer.json"))
    with open(os.path.join(assets, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "add_bos_token": True, "add_eos_token": True}, f)
    rng = random.Random(seed)
    with open(os.path.join(data, "data.json"), "w") as f:
        for _ in range(n_docs):
            text = " ".join(f"w{rng.randrange(N_WORDS)}" for _ in range(words_per_doc))
            f.write(json.dumps({"text": text}) + "\n")
    return assets, data


def torchtitan_args(args, assets: str, data: str, dump: str) -> list[str]:
    """TorchTitan's own command line for this run (tyro; comma-separated lists)."""
    flavor = registered_flavor(args)
    cli = [
        "--job.dump_folder", dump,
        "--model.name", "llama3", "--model.flavor", flavor, "--model.hf_assets_path", assets,
        "--training.dataset", "c4_test", "--training.dataset_path", data,
        "--training.seq_len", str(args.seq_len), "--training.local_batch_size", str(args.batch),
        "--training.steps", str(args.steps), "--training.max_norm", "1.0",
        "--optimizer.name", "AdamW", "--optimizer.lr", str(args.lr), "--optimizer.eps", "1e-8",
        "--lr_scheduler.warmup_steps", "2",
        "--activation_checkpoint.mode", "none",
        "--metrics.log_freq", "1", "--metrics.disable_color_printing",
        "--checkpoint.no-enable", "--profiling.no-enable-profiling", "--metrics.no-enable-tensorboard",
        "--debug.seed", str(args.seed),
    ]
    if args.mode == "compile":
        cli += ["--compile.enable", "--compile.components", "model,loss"]
    else:
        cli += ["--compile.no-enable"]
    if args.float8 != "none":
        cli += ["--model.converters", "quantize.linear.float8",
                "--quantize.linear.float8.recipe_name", args.float8,
                "--quantize.linear.float8.filter_fqns", "output"]
    return cli


def registered_flavor(args) -> str:
    return f"{args.flavor}_{args.n_layers}L" if args.n_layers else args.flavor


def register_flavor(args) -> None:
    import dataclasses

    from torchtitan.models.llama3 import llama3_args

    if args.n_layers:
        llama3_args[registered_flavor(args)] = dataclasses.replace(llama3_args[args.flavor], n_layers=args.n_layers)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child(args, cli: list[str]) -> int:
    """In the training process: TorchTitan's main(Trainer), then the allocator's peaks."""
    # First: ConfigManager.parse_args's default argument is sys.argv[1:] as it was when
    # torchtitan.config was imported, so the command line is TorchTitan's before any import.
    sys.argv = ["torchtitan.train"] + cli
    register_flavor(args)
    import torch
    from torchtitan.train import Trainer, main

    main(Trainer)
    if torch.cuda.is_available():
        stats = torch.cuda.memory_stats()
        print("torchtitan_peer_memory " + json.dumps({
            "max_active_bytes_last_step": stats.get("active_bytes.all.peak", 0),
            "max_reserved_bytes": torch.cuda.max_memory_reserved()}), file=sys.stderr, flush=True)
    return 0


def check(args, cli: list[str]) -> int:
    """No GPU: the flavor, TorchTitan's parse of this command line, the model on meta, one batch."""
    register_flavor(args)
    import torch
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.config import ConfigManager
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataset
    from torchtitan.protocols.train_spec import get_train_spec

    config = ConfigManager().parse_args(cli)
    spec = get_train_spec(config.model.name)
    margs = spec.model_args[config.model.flavor]
    margs.update_from_config(config)
    with torch.device("meta"):
        model = spec.model_cls(margs)
    nparams = sum(p.numel() for p in model.parameters())
    tok = HuggingFaceTokenizer(config.model.hf_assets_path)
    ds = HuggingFaceTextDataset(config.training.dataset, config.training.dataset_path, tok,
                                seq_len=config.training.seq_len, infinite=True)
    inputs, labels = next(iter(ds))
    print(json.dumps({"check": "ok", "flavor": config.model.flavor, "n_layers": margs.n_layers,
                      "nparams": nparams, "compile": config.compile.enable,
                      "converters": config.model.converters,
                      "float8_recipe": config.quantize.linear.float8.recipe_name,
                      "batch_tokens": int(inputs["input"].numel() if isinstance(inputs, dict) else inputs.numel()),
                      "max_token": int(labels.max())}), flush=True)
    return 0


def summarise(args, lines: list[str], wall_s: float, rc: int) -> dict:
    steps = []
    memory = {}
    for raw in lines:
        line = ANSI.sub("", raw)
        m = STEP_LINE.search(line)
        if m:
            steps.append({"step": int(m[1]), "loss": float(m[2]), "grad_norm": float(m[3]),
                          "reserved_gib": float(m[4]), "tps": float(m[6].replace(",", "")),
                          "tflops": float(m[7].replace(",", "")), "mfu_pct": float(m[8])})
        elif line.startswith("torchtitan_peer_memory "):
            memory = json.loads(line.split(" ", 1)[1])
    measured = [s["tps"] for s in steps if s["step"] > args.warmup]
    out = {
        "peer": "torchtitan", "torchtitan_version": version_of("torchtitan"), "torchao_version": version_of("torchao"),
        "flavor": args.flavor, "n_layers": args.n_layers, "mode": args.mode, "float8": args.float8,
        "dtype": "bf16 autocast, fp32 parameters (TorchTitan on one GPU: no FSDP)",
        "seq_len": args.seq_len, "batch": args.batch, "steps": args.steps, "warmup": args.warmup,
        "exit_code": rc, "wall_s": round(wall_s, 2), "steps_logged": len(steps),
        "tps_median": statistics.median(measured) if measured else None,
        "tps_min": min(measured) if measured else None, "tps_max": max(measured) if measured else None,
        "mfu_pct_median": statistics.median(s["mfu_pct"] for s in steps if s["step"] > args.warmup) if measured else None,
        "final_loss": steps[-1]["loss"] if steps else None,
        "losses": [s["loss"] for s in steps], "tps": [s["tps"] for s in steps],
        "max_reserved_gib_per_step": [s["reserved_gib"] for s in steps],
    }
    out.update(memory)
    return out


def version_of(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:  # noqa: BLE001 - a missing package is reported as null
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)
    ap.add_argument("--flavor", default="8B")
    ap.add_argument("--n-layers", type=int, default=None)
    ap.add_argument("--mode", default="eager", choices=["eager", "compile"])
    ap.add_argument("--float8", default="none", choices=["none", "tensorwise", "rowwise"])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5, help="initial steps excluded from the median")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="folder for the assets, dataset and TorchTitan's dump (a temporary one)")
    ap.add_argument("--log", default=None, help="write TorchTitan's whole output here")
    ap.add_argument("--json", action="store_true", help="print the JSON summary on stdout")
    ap.add_argument("--check", action="store_true", help="no training: parse, build on meta, read one batch")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args, rest = ap.parse_known_args(argv)
    if args.child:
        return child(args, rest)
    if rest:
        ap.error(f"unknown arguments: {' '.join(rest)}")
    if args.warmup >= args.steps:
        ap.error("--warmup must be smaller than --steps")
    work = args.work or tempfile.mkdtemp(prefix="torchtitan_peer_")
    assets, data = write_assets(work, args.seed)
    cli = torchtitan_args(args, assets, data, os.path.join(work, "dump"))
    os.environ.setdefault("HF_HOME", os.path.join(work, "hf"))
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.check:
        return check(args, cli)
    env = dict(os.environ, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), PYTHONUNBUFFERED="1")
    own = [a for a in (argv if argv is not None else sys.argv[1:]) if a not in ("--json",)]
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *own, *cli]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    lines = proc.stdout.splitlines()
    if args.log:
        with open(args.log, "w") as f:
            f.write(proc.stdout)
    summary = summarise(args, lines, wall, proc.returncode)
    summary["command"] = "torchtitan.train " + " ".join(cli)
    if proc.returncode != 0 or summary["tps_median"] is None:
        sys.stderr.write("\n".join(lines[-40:]) + "\n")
        sys.stderr.write(f"torchtitan_peer: TorchTitan exited {proc.returncode} after {len(lines)} lines; "
                         f"{summary['steps_logged']} step lines read\n")
    print(json.dumps(summary) if args.json else
          f"torchtitan {args.mode} float8={args.float8}: tps median {summary['tps_median']}", flush=True)
    return 0 if proc.returncode == 0 and summary["tps_median"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
