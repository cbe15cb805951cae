#!/usr/bin/env python3
"""Independent re-check of tests/golden/llama3_tiny.json.

Re-computes everything from the stored parameters and tokens with explicit float64
tensor arithmetic (real cos/sin RoPE on interleaved pairs, explicit masked softmax
attention, explicit RMSNorm, hand-written AdamW) - no nn modules, no SDPA, no complex
numbers, no torch.optim - and compares with the stored goldens.

Usage: .venv/bin/python tests/peer/check_goldens.py [path/to/llama3_tiny.json]
"""

import json
import math
import os
import sys

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "tests", "golden", "llama3_tiny.json")
    g = json.load(open(path))
    a = g["model_args"]
    D, H, KV, HD, V = a["dim"], a["n_heads"], a["n_kv_heads"], a["head_dim"], a["vocab_size"]
    eps, S, B = a["norm_eps"], g["seq_len"], g["batch"]
    t64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    P = {n: t64(v["data"]).view(v["shape"]).requires_grad_(True) for n, v in g["params"].items()}
    tokens, labels = torch.tensor(g["tokens"]), torch.tensor(g["labels"])

    # RoPE angles from scratch (Llama 3.1 scaling)
    rs = a["rope_scaling"]
    inv = [1.0 / a["rope_theta"] ** (2 * i / HD) for i in range(HD // 2)]
    lo_w = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    hi_w = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    scaled = []
    for f in inv:
        w = 2 * math.pi / f
        if w < hi_w:
            scaled.append(f)
        elif w > lo_w:
            scaled.append(f / rs["scaling_factor"])
        else:
            sm = (rs["original_max_position_embeddings"] / w - rs["low_freq_factor"]) / (
                rs["high_freq_factor"] - rs["low_freq_factor"])
            scaled.append((1 - sm) * f / rs["scaling_factor"] + sm * f)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * t64(scaled)[None, :]
    cos, sin = ang.cos(), ang.sin()

    def rope(x):  # x [B,S,h,HD]; pairs (2i, 2i+1)
        xe, xo = x[..., 0::2], x[..., 1::2]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack((xe * c - xo * s, xe * s + xo * c), dim=-1).flatten(-2)

    def rms(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)
    h = P["tok_embeddings.weight"][tokens]
    for i in range(a["n_layers"]):
        p = lambda k: P[f"layers.{i}.{k}.weight"]  # noqa: E731
        x = rms(h, p("attention_norm"))
        q = rope((x @ p("attention.wq").T).view(B, S, H, HD))
        k = rope((x @ p("attention.wk").T).view(B, S, KV, HD))
        v = (x @ p("attention.wv").T).view(B, S, KV, HD)
        k, v = k.repeat_interleave(H // KV, dim=2), v.repeat_interleave(H // KV, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HD) + mask, dim=-1) @ v
        h = h + att.transpose(1, 2).reshape(B, S, H * HD) @ p("attention.wo").T
        x = rms(h, p("ffn_norm"))
        a1, a3 = x @ p("feed_forward.w1").T, x @ p("feed_forward.w3").T
        h = h + (a1 * torch.sigmoid(a1) * a3) @ p("feed_forward.w2").T
    logits = rms(h, P["norm.weight"]) @ P["output.weight"].T
    lse = torch.logsumexp(logits, dim=-1)
    loss = (lse - logits.gather(-1, labels[..., None]).squeeze(-1)).mean()
    loss.backward()

    gn = math.sqrt(sum(float((P[n].grad ** 2).sum()) for n in P))
    coef = min(1.0, 1.0 / (gn + 1e-6))
    o = g["optimizer"]
    b1, b2 = o["betas"]
    after = {}
    for n, w in P.items():
        gr = w.grad * coef
        m, v2 = (1 - b1) * gr, (1 - b2) * gr * gr
        mhat, vhat = m / (1 - b1), v2 / (1 - b2)
        after[n] = w.detach() * (1 - o["lr"] * o["weight_decay"]) - o["lr"] * mhat / (vhat.sqrt() + o["eps"])

    def err(x, ref):
        return (x.detach().flatten() - t64(ref)).abs().max().item()

    checks = {
        "rope_cos": err(cos, g["rope"]["cos"]),
        "rope_sin": err(sin, g["rope"]["sin"]),
        "logits_row0": err(logits[0], g["logits_row0"]["data"]),
        "loss": abs(loss.item() - g["loss"]),
        "grad_norm": abs(gn - g["grad_norm"]),
        "grads": max(err(P[n].grad, g["grads"][n]) for n in P),
        "params_after_step": max(err(after[n], g["params_after_step"][n]) for n in P),
    }
    ok = True
    for k, e in checks.items():
        good = e < 1e-6
        ok &= good
        print(f"{k:18s} max abs diff {e:.3g}  {'ok' if good else 'MISMATCH'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
