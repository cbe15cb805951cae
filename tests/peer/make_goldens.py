#!/usr/bin/env python3
"""Golden values for ctitan's C++ Llama 3 tests (written to tests/golden/llama3_tiny.json).

The model is tests/peer/llama_peer.py's re-statement of TorchTitan's Llama 3. Weights
are initialised in fp32 with TorchTitan's init_weights under torch.manual_seed(seed)
(so every stored parameter is exactly fp32), then the whole model is converted to
float64 (model.double(), complex128 RoPE table) and the forward, loss, backward,
gradient clipping and one AdamW step are computed in float64. Every stored value is
the nearest fp32 of the float64 result, written as the shortest decimal that
round-trips to that fp32 (numpy's str(np.float32)).

Also prints TorchTitan's parameter counts and flops-per-token for the debugmodel and
8B flavors (instantiated on the meta device) and writes them into the JSON.

Usage:
  .venv/bin/python tests/peer/make_goldens.py [--out tests/golden/llama3_tiny.json]
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_peer as lp  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BATCH, SEQ = 2, 8
LR, BETAS, EPS, WD, MAX_NORM = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0


# ----------------------------------------------------------------------------- JSON output


class F32List:
    """A flat list of floats, written as shortest-round-trip fp32 decimals."""

    def __init__(self, t: torch.Tensor):
        self.v = t.detach().to(torch.float64).flatten().numpy().astype(np.float32)


def _f32(x: np.float32) -> str:
    if not np.isfinite(x):
        raise ValueError(f"non-finite golden value {x}")
    s = str(x)  # shortest repr that round-trips to this fp32, e.g. 0.012345679, 1e-05
    return s


def dump(obj, indent: int = 0) -> str:
    pad, pad1 = " " * indent, " " * (indent + 1)
    if isinstance(obj, F32List):
        return "[" + ",".join(_f32(x) for x in obj.v) + "]"
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{pad1}{dump(str(k))}: {dump(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(dump(v, indent + 1) for v in obj) + "]"
    if isinstance(obj, str):
        import json

        return json.dumps(obj)
    if isinstance(obj, bool) or obj is None:
        return {True: "true", False: "false", None: "null"}[obj]
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, float):
        return _f32(np.float32(obj)) if float(np.float32(obj)) == obj else repr(obj)
    raise TypeError(type(obj))


def f32(x: float) -> float:
    """Round a Python float to the nearest fp32 value (still a Python float)."""
    return float(np.float32(x))


# ----------------------------------------------------------------------------- flavor counts


def flavor_counts(name: str, seq_len: int) -> dict:
    a = copy.deepcopy(lp.FLAVORS[name])
    a.max_seq_len = seq_len
    with torch.device("meta"):
        model = lp.Transformer(a)
    nparams, nemb, flops = lp.nparams_and_flops(model, a, seq_len)
    return {
        "nparams": nparams,
        "nparams_embedding": nemb,
        "seq_len": seq_len,
        "flops_per_token": flops,
        "ffn_hidden_dim": a.ffn_hidden_dim,
    }


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "golden", "llama3_tiny.json"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.set_num_threads(1)  # deterministic reductions
    a = copy.deepcopy(lp.FLAVORS["tiny"])
    a.max_seq_len = SEQ

    # -- fp32 init with TorchTitan's init_weights, then a float64 copy of the same values
    torch.manual_seed(args.seed)
    model32 = lp.Transformer(a)
    with torch.no_grad():
        model32.init_weights()
    data = torch.randint(0, a.vocab_size, (BATCH, SEQ + 1), generator=torch.Generator().manual_seed(args.seed + 1))
    tokens, labels = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    model = copy.deepcopy(model32).double()
    model.freqs_cis = model._precompute_freqs_cis(torch.float64)  # complex128 table
    names = [n for n, _ in model.named_parameters()]

    # -- float64 reference: forward, loss, backward, clip, one AdamW step
    logits = model(tokens)
    loss = lp.loss_fn(logits, labels)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    params_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM, foreach=False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD,
                            foreach=False, fused=False)
    opt.step()
    params_after = {n: p.detach().clone() for n, p in model.named_parameters()}

    # -- fp32 run of the same thing (TorchTitan's fused AdamW), to report expected fp32 error
    logits32 = model32(tokens)
    loss32 = lp.loss_fn(logits32, labels)
    loss32.backward()
    grads32 = {n: p.grad.detach().clone() for n, p in model32.named_parameters()}
    gn32 = torch.nn.utils.clip_grad_norm_(model32.parameters(), MAX_NORM, foreach=True)
    lp.build_adamw(model32.parameters(), lr=LR, weight_decay=WD,
                   impl="fused" if lp.fused_adamw_works() else "foreach").step()

    def maxdiff(x64, x32):
        return (x64 - x32.double()).abs().max().item()

    p32 = dict(model32.named_parameters())
    fp32_err = {
        "logits_max_abs": maxdiff(logits.detach(), logits32.detach()),
        "loss_abs": abs(loss.item() - loss32.item()),
        "grad_max_abs": max(maxdiff(grads[n], grads32[n]) for n in names),
        "grad_norm_abs": abs(grad_norm.item() - gn32.item()),
        "param_after_max_abs": max(maxdiff(params_after[n], p32[n].detach()) for n in names),
    }

    freqs = model.freqs_cis[:SEQ]  # [SEQ, head_dim/2] complex128
    sched = {
        "warmup_steps": 2, "stable_steps": 0, "decay_steps": 8, "lr_min": 0.0,
        "factors": [lp.linear_warmup_stable_decay(s, 2, 0, 8) for s in range(11)],
    }
    counts = {
        "debugmodel": flavor_counts("debugmodel", 2048),
        "8B": flavor_counts("8B", 8192),
        "tiny": flavor_counts("tiny", SEQ),
    }

    golden = {
        "format": "ctitan llama3 golden v1",
        "generator": "tests/peer/make_goldens.py",
        "torch_version": torch.__version__,
        "seed": args.seed,
        "model_args": {
            "dim": a.dim, "n_layers": a.n_layers, "n_heads": a.n_heads, "n_kv_heads": a.kv_heads,
            "head_dim": a.head_dim, "vocab_size": a.vocab_size, "multiple_of": a.multiple_of,
            "ffn_dim_multiplier": a.ffn_dim_multiplier, "ffn_hidden_dim": a.ffn_hidden_dim,
            "norm_eps": a.norm_eps, "rope_theta": a.rope_theta,
            "rope_scaling": {
                "scaling_factor": a.rope_scaling_args.scaling_factor,
                "low_freq_factor": a.rope_scaling_args.low_freq_factor,
                "high_freq_factor": a.rope_scaling_args.high_freq_factor,
                "original_max_position_embeddings": a.rope_scaling_args.original_max_position_embeddings,
            },
            "max_seq_len": a.max_seq_len, "depth_init": a.depth_init,
        },
        "batch": BATCH,
        "seq_len": SEQ,
        "tokens": tokens.tolist(),
        "labels": labels.tolist(),
        "rope": {"shape": list(freqs.shape), "cos": F32List(freqs.real), "sin": F32List(freqs.imag)},
        "param_names": names,
        "params": {n: {"shape": list(params_before[n].shape), "data": F32List(params_before[n])} for n in names},
        "logits_row0": {"shape": [SEQ, a.vocab_size], "data": F32List(logits[0])},
        "loss": f32(loss.item()),
        "grads": {n: F32List(grads[n]) for n in names},
        "grad_norm": f32(grad_norm.item()),
        "optimizer": {"name": "AdamW", "lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WD,
                      "max_norm": MAX_NORM, "clip_coef": f32(min(1.0, MAX_NORM / (grad_norm.item() + 1e-6)))},
        "params_after_step": {n: F32List(params_after[n]) for n in names},
        "fp32_vs_fp64_max_abs_error": {k: float(f"{v:.3g}") for k, v in fp32_err.items()},
        "lr_schedule_example": sched,
        "flavor_counts": counts,
    }
    text = dump(golden) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)

    print(f"wrote {args.out}: {len(text):,} bytes, {sum(p.numel() for p in model.parameters()):,} params")
    print(f"tiny: loss {loss.item():.9f}  grad_norm {grad_norm.item():.9f}")
    print("fp32-vs-fp64 max abs error:", {k: f"{v:.3g}" for k, v in fp32_err.items()})
    for name in ("debugmodel", "8B"):
        c = counts[name]
        print(f"{name}: nparams {c['nparams']:,}  nparams_embedding {c['nparams_embedding']:,}  "
              f"ffn_hidden_dim {c['ffn_hidden_dim']}  flops_per_token(seq {c['seq_len']}) {c['flops_per_token']:,}")
    assert counts["debugmodel"]["nparams"] == 6_163_712, counts["debugmodel"]
    assert counts["8B"]["nparams"] == 8_030_261_248, counts["8B"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
