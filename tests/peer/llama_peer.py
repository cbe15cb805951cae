#!/usr/bin/env python3
"""Python peer benchmark for ctitan: Llama 3 trained by eager PyTorch / torch.compile.

Self-contained (torch only; no torchtitan import). The model re-states TorchTitan's
Llama 3 definition (torchtitan/models/llama3/model/{model,args}.py, v0.2.x):

  * RMSNorm (torch.nn.RMSNorm, eps 1e-5; computes in fp32 and casts back),
  * RoPE theta 500000 with Llama 3.1 scaling (factor 8, low/high freq factor 1/4,
    original_max_position_embeddings 8192) applied in precompute_freqs_cis,
    interleaved complex-pair rotation,
  * GQA via repeat_kv + F.scaled_dot_product_attention(is_causal=True),
  * SwiGLU FFN w2(silu(w1 x) * w3 x), hidden = multiple_of-rounded int(2*4*dim/3)
    (times ffn_dim_multiplier if set), no biases anywhere,
  * final norm + output projection, loss = cross_entropy(logits.float(), labels),
  * TorchTitan's init_weights (depth_init=True),
  * TorchTitan's parameter FQNs (layers is a ModuleDict keyed "0".."n-1").

Training loop mirrors TorchTitan's defaults: AdamW (lr 8e-4, betas (0.9, 0.95),
eps 1e-8, weight_decay 0.1, implementation "fused" - which works on CPU), LambdaLR
with linear_warmup_stable_decay (linear warmup, linear decay to 0, no stable phase),
clip_grad_norm_(max_norm=1.0, foreach=True), synthetic uniform random tokens.

--dtype bf16 mimics FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32):
master parameters stay fp32, every parameter is cast to bf16 at its point of use (so
the forward/backward run in bf16 and the cast's backward delivers fp32 gradients),
logits are cast to fp32 for the loss. --dtype fp32 runs everything in fp32.

Examples:
  .venv/bin/python tests/peer/llama_peer.py --flavor debugmodel --mode eager --dtype bf16
  .venv/bin/python tests/peer/llama_peer.py --flavor debugmodel --mode compile --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


# ----------------------------------------------------------------------------- args


@dataclass
class RoPEScalingArgs:
    scaling_factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = None
    vocab_size: int = 128256
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling_args: RoPEScalingArgs | None = field(default_factory=RoPEScalingArgs)
    max_seq_len: int = 131072  # TorchTitan overwrites this with training.seq_len
    depth_init: bool = True

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_hidden_dim(self) -> int:
        return ffn_hidden_dim(self.dim, self.multiple_of, self.ffn_dim_multiplier)


def ffn_hidden_dim(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


FLAVORS: dict[str, ModelArgs] = {
    # golden-test flavor (ctitan only)
    "tiny": ModelArgs(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, multiple_of=16),
    # TorchTitan llama3 "debugmodel"
    "debugmodel": ModelArgs(dim=256, n_layers=6, n_heads=16, vocab_size=2048, multiple_of=256),
    # ctitan's small benchmark flavor
    "125M": ModelArgs(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, vocab_size=32000, multiple_of=256),
    # TorchTitan llama3 "8B" (whole, for parameter counts / flops on the meta device;
    # with --n-layers 4, the 8B-shaped model scripts/gpu_check.sh trains on one GPU)
    "8B": ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, vocab_size=128256,
                    multiple_of=1024, ffn_dim_multiplier=1.3),
}


# ----------------------------------------------------------------------------- rope


def apply_scaling(freqs: torch.Tensor, s: RoPEScalingArgs) -> torch.Tensor:
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * torch.pi / freqs
    new_freqs = torch.where(wavelen > low_freq_wavelen, freqs / s.scaling_factor, freqs)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    return torch.where(
        (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen),
        (1 - smooth) * new_freqs / s.scaling_factor + smooth * new_freqs,
        new_freqs,
    )


def precompute_freqs_cis(
    dim: int,
    end: int,
    theta: float,
    rope_scaling_args: RoPEScalingArgs | None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """TorchTitan's precompute_freqs_cis. dtype=float32 gives TorchTitan's complex64
    table; dtype=float64 gives a complex128 table (used for the float64 goldens)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].to(dtype) / dim))
    t = torch.arange(end, device=freqs.device)
    if rope_scaling_args is not None:
        freqs = apply_scaling(freqs, rope_scaling_args)
    freqs = torch.outer(t, freqs).to(dtype)
    return torch.polar(torch.ones_like(freqs), freqs)


def _rope_real_dtype(dtype: torch.dtype) -> torch.dtype:
    # TorchTitan does xq.float(); keep float64 when the whole model runs in float64.
    return torch.float64 if dtype == torch.float64 else torch.float32


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, freqs_cis: torch.Tensor):
    """Interleaved (complex pair) rotation: pairs (x[2i], x[2i+1])."""
    rd = _rope_real_dtype(xq.dtype)
    xq_ = torch.view_as_complex(xq.to(rd).reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.to(rd).reshape(*xk.shape[:-1], -1, 2))
    seqlen = xq.shape[1]
    fc = freqs_cis[0:seqlen].view(1, seqlen, 1, xq_.shape[-1])  # reshape_for_broadcast
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        torch.unsqueeze(x, dim=3)
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


# ----------------------------------------------------------------------------- modules
# Thin subclasses that cast their weight to `param_dtype` at use (FSDP2-style mixed
# precision). With param_dtype None the weight is used as stored. State-dict keys are
# unchanged (".weight").


def _cast(w: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    return w if dtype is None else w.to(dtype)


class Linear(nn.Linear):
    def __init__(self, in_f: int, out_f: int, param_dtype: torch.dtype | None = None):
        super().__init__(in_f, out_f, bias=False)
        self.param_dtype = param_dtype

    def forward(self, x):
        return F.linear(x, _cast(self.weight, self.param_dtype))


class Embedding(nn.Embedding):
    def __init__(self, num: int, dim: int, param_dtype: torch.dtype | None = None):
        super().__init__(num, dim)
        self.param_dtype = param_dtype

    def forward(self, tokens):
        return F.embedding(tokens, _cast(self.weight, self.param_dtype))


class RMSNorm(nn.RMSNorm):
    def __init__(self, dim: int, eps: float, param_dtype: torch.dtype | None = None):
        super().__init__(dim, eps=eps)
        self.param_dtype = param_dtype

    def forward(self, x):
        # F.rms_norm upcasts low-precision inputs to fp32 internally and casts back.
        return F.rms_norm(x, self.normalized_shape, _cast(self.weight, self.param_dtype), self.eps)


class Attention(nn.Module):
    def __init__(self, a: ModelArgs, pd: torch.dtype | None):
        super().__init__()
        self.n_heads = a.n_heads
        self.n_kv_heads = a.kv_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.head_dim = a.head_dim
        self.wq = Linear(a.dim, a.n_heads * self.head_dim, pd)
        self.wk = Linear(a.dim, self.n_kv_heads * self.head_dim, pd)
        self.wv = Linear(a.dim, self.n_kv_heads * self.head_dim, pd)
        self.wo = Linear(a.n_heads * self.head_dim, a.dim, pd)

    def init_weights(self, init_std: float):
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)

    def forward(self, x, freqs_cis):
        bs, seqlen, _ = x.shape
        xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
        xq = xq.view(bs, seqlen, -1, self.head_dim)
        xk = xk.view(bs, seqlen, -1, self.head_dim)
        xv = xv.view(bs, seqlen, -1, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
        keys = repeat_kv(xk, self.n_rep)
        values = repeat_kv(xv, self.n_rep)
        xq = xq.transpose(1, 2)
        xk = keys.transpose(1, 2)
        xv = values.transpose(1, 2)
        out = F.scaled_dot_product_attention(xq, xk, xv, is_causal=True)
        out = out.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, a: ModelArgs, pd: torch.dtype | None):
        super().__init__()
        hidden = a.ffn_hidden_dim
        self.w1 = Linear(a.dim, hidden, pd)
        self.w2 = Linear(hidden, a.dim, pd)
        self.w3 = Linear(a.dim, hidden, pd)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, init_std: float):
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for linear in (self.w2, self.w3):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=init_std)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, a: ModelArgs, pd: torch.dtype | None):
        super().__init__()
        self.attention = Attention(a, pd)
        self.feed_forward = FeedForward(a, pd)
        self.attention_norm = RMSNorm(a.dim, a.norm_eps, pd)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps, pd)
        if a.depth_init:
            self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5
        else:
            self.weight_init_std = 0.02 / (2 * a.n_layers) ** 0.5

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.feed_forward.init_weights(self.weight_init_std)


class Transformer(nn.Module):
    def __init__(self, a: ModelArgs, param_dtype: torch.dtype | None = None):
        super().__init__()
        self.model_args = a
        self.tok_embeddings = Embedding(a.vocab_size, a.dim, param_dtype)
        self.register_buffer("freqs_cis", self._precompute_freqs_cis(), persistent=False)
        self.layers = nn.ModuleDict(
            {str(i): TransformerBlock(i, a, param_dtype) for i in range(a.n_layers)}
        )
        self.norm = RMSNorm(a.dim, a.norm_eps, param_dtype)
        self.output = Linear(a.dim, a.vocab_size, param_dtype)

    def _precompute_freqs_cis(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        a = self.model_args
        return precompute_freqs_cis(a.head_dim, a.max_seq_len, a.rope_theta, a.rope_scaling_args, dtype)

    def init_weights(self, buffer_device: torch.device | None = None, rope_dtype=torch.float32):
        buffer_device = buffer_device or self.freqs_cis.device
        with torch.device(buffer_device):
            self.freqs_cis = self._precompute_freqs_cis(rope_dtype)
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights()
        self.norm.reset_parameters()
        final_out_std = self.model_args.dim**-0.5
        cutoff_factor = 3
        nn.init.trunc_normal_(
            self.output.weight,
            mean=0.0,
            std=final_out_std,
            a=-cutoff_factor * final_out_std,
            b=cutoff_factor * final_out_std,
        )

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.freqs_cis)
        h = self.norm(h)
        return self.output(h)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """TorchTitan's cross_entropy_loss: logits upcast to fp32 (kept fp64 for goldens)."""
    ld = torch.float64 if logits.dtype == torch.float64 else torch.float32
    return F.cross_entropy(logits.flatten(0, 1).to(ld), labels.flatten(0, 1))


def nparams_and_flops(model: nn.Module, a: ModelArgs, seq_len: int) -> tuple[int, int, int]:
    """TorchTitan's get_dense_model_nparams_and_flops: 6*(N - N_emb) + 12*L*H*(D/H)*S."""
    nparams = sum(p.numel() for p in model.parameters())
    nparams_embedding = sum(
        sum(p.numel() for p in m.parameters()) for m in model.children() if isinstance(m, nn.Embedding)
    )
    l, h, q, t = a.n_layers, a.n_heads, a.dim // a.n_heads, seq_len
    return nparams, nparams_embedding, 6 * (nparams - nparams_embedding) + 12 * l * h * q * t


# ----------------------------------------------------------------------------- lr schedule


def linear_warmup_stable_decay(
    current_step: int, warmup_steps: int, stable_steps: int, decay_steps: int, lr_min: float = 0.0
) -> float:
    """TorchTitan's LambdaLR factor (decay_type "linear"). current_step is 0-based."""
    warmup_stable_steps = warmup_steps + stable_steps
    if current_step >= warmup_stable_steps + decay_steps:
        current_step = warmup_stable_steps + decay_steps
    if current_step < warmup_steps:
        return float((current_step + 1) / (warmup_steps + 1))
    if current_step < warmup_stable_steps or decay_steps == 0:
        return 1.0
    progress = float((current_step + 1) - warmup_stable_steps) / (decay_steps + 1)
    curr_adjustment = 1 - progress
    return lr_min + (1 - lr_min) * curr_adjustment


def build_adamw(params, lr: float, weight_decay: float = 0.1, impl: str = "fused") -> torch.optim.AdamW:
    """TorchTitan build_optimizers: implementation "fused" (default) / "foreach" / "for-loop"."""
    return torch.optim.AdamW(
        params,
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
        weight_decay=weight_decay,
        fused=(impl == "fused"),
        foreach=(impl == "foreach"),
    )


def fused_adamw_works(device: str = "cpu") -> bool:
    try:
        p = nn.Parameter(torch.ones(4, device=device))
        p.grad = torch.ones(4, device=device)
        build_adamw([p], lr=1e-3, impl="fused").step()
        return bool(torch.isfinite(p).all())
    except (RuntimeError, ValueError):
        return False


# ----------------------------------------------------------------------------- benchmark


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def peer_arguments(flavors, default_flavor: str, doc: str, steps_help: str = "") -> argparse.ArgumentParser:
    """The peers' common command line (model, shapes, loop, optimizer, device, output)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flavor", default=default_flavor, choices=list(flavors))
    ap.add_argument("--n-layers", type=int, default=None,
                    help="replace the flavor's layer count (ctitan: --model.n_layers)")
    ap.add_argument("--mode", default="eager", choices=["eager", "compile", "compile_model"],
                    help="compile: torch.compile over the model and the loss together (TorchTitan's "
                         "compile.components = model,loss); compile_model: the model only, the loss eager")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30, help=steps_help or None)
    ap.add_argument("--warmup", type=int, default=10, help="initial steps excluded from the stats")
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--lr-warmup-steps", type=int, default=2)
    ap.add_argument("--max-norm", type=float, default=1.0)
    ap.add_argument("--optimizer-impl", default="auto", choices=["auto", "fused", "foreach", "for-loop"],
                    help="auto = fused if it works on this device, else foreach")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: the GPU of LOCAL_RANK (0); TF32 stays PyTorch's default (off for matmuls)")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: all cores)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON summary line on stdout (step lines go to stderr)")
    return ap


def setup_run(ap: argparse.ArgumentParser, args):
    """Threads, seed and the log function of a parsed command line; returns (threads, log)."""
    if args.n_layers is not None and args.n_layers < 1:
        ap.error("--n-layers must be at least 1")
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    return threads, log


def main(argv=None) -> int:
    ap = peer_arguments(FLAVORS, "debugmodel", __doc__)
    args = ap.parse_args(argv)
    if args.warmup >= args.steps:
        ap.error("--warmup must be smaller than --steps")
    threads, log = setup_run(ap, args)

    margs = ModelArgs(**{**FLAVORS[args.flavor].__dict__})
    if args.n_layers is not None:
        margs.n_layers = args.n_layers
    margs.max_seq_len = args.seq_len  # TorchTitan: update_from_config sets max_seq_len = seq_len
    param_dtype = torch.bfloat16 if args.dtype == "bf16" else None

    with torch.device("meta"):
        model = Transformer(margs, param_dtype)
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if args.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    model.to_empty(device=dev)
    with torch.no_grad():
        model.init_weights(buffer_device=dev)
    model.train()
    nparams, _, flops_per_token = nparams_and_flops(model, margs, args.seq_len)

    fwd = torch.compile(model) if args.mode == "compile_model" else model
    fwd_loss = None
    if args.mode == "compile":
        # The model and the loss in one graph: the fp32 copy of the logits can fuse into the
        # cross-entropy instead of being written out (the old mode compiled the model only).
        fwd_loss = torch.compile(lambda inputs, labels: loss_fn(model(inputs), labels))
    return train_and_report("llama_peer", model, fwd, margs.vocab_size, args, dev, threads,
                            {"flavor": args.flavor, "n_layers": margs.n_layers, "nparams": nparams,
                             "flops_per_token": flops_per_token}, fwd_loss=fwd_loss)


def train_and_report(name: str, model: nn.Module, fwd, vocab_size: int, args, dev: torch.device, threads: int,
                     facts: dict, before_optimizer_step=None, fwd_loss=None) -> int:
    """TorchTitan's training loop over synthetic tokens, timed per step, then the summary.

    `fwd` is the model or its compiled form; `facts` (flavor, n_layers, nparams,
    flops_per_token, ...) go into the log line and the --json summary;
    `before_optimizer_step` runs between clipping and the optimizer step;
    `fwd_loss(inputs, labels)`, when given, replaces the model and the loss (one compiled graph).
    """
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if args.json else (lambda s: print(s, flush=True))
    impl = args.optimizer_impl
    if impl == "auto":
        impl = "fused" if fused_adamw_works(dev.type) else "foreach"
    opt = build_adamw(model.parameters(), lr=args.lr, impl=impl)
    decay_steps = args.steps - args.lr_warmup_steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: linear_warmup_stable_decay(s, args.lr_warmup_steps, 0, decay_steps),
    )
    flops_per_token = facts["flops_per_token"]
    log(
        f"{name}: flavor={args.flavor} params={facts['nparams']:,} mode={args.mode} dtype={args.dtype} "
        f"seq_len={args.seq_len} batch={args.batch} steps={args.steps} threads={threads} "
        f"optimizer=AdamW({impl}) torch={torch.__version__}"
    )

    ntok = args.batch * args.seq_len
    step_times, losses = [], []
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        data = torch.randint(0, vocab_size, (args.batch, args.seq_len + 1)).to(dev, non_blocking=True)
        inputs, labels = data[:, :-1], data[:, 1:]
        opt.zero_grad(set_to_none=True)
        if fwd_loss is not None:
            loss = fwd_loss(inputs, labels)
        else:
            logits = fwd(inputs)
            loss = loss_fn(logits, labels)
            del logits
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm, foreach=True)
        if before_optimizer_step is not None:
            before_optimizer_step()
        opt.step()
        sched.step()
        loss_v = loss.item()
        dt = time.perf_counter() - t0
        step_times.append(dt)
        losses.append(loss_v)
        tps = ntok / dt
        log(
            f"step: {step:2d}  loss: {loss_v:7.4f}  grad_norm: {grad_norm.item():7.4f}  "
            f"tps: {tps:,.0f}  tflops: {flops_per_token * tps / 1e12:.3f}  time: {dt:.3f}s"
        )

    measured = step_times[args.warmup:]
    tps_list = [ntok / t for t in measured]
    summary = {
        "flavor": args.flavor,
        "mode": args.mode,
        "dtype": args.dtype,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "tps_median": statistics.median(tps_list),
        "tps_p10": percentile(tps_list, 0.10),
        "tps_p90": percentile(tps_list, 0.90),
        "step_time_median_s": statistics.median(measured),
        "final_loss": losses[-1],
        "losses": losses,
        "step_times_s": step_times,
        "torch_version": torch.__version__,
        "num_threads": torch.get_num_threads(),
        "optimizer_impl": impl,
        "device": str(dev) if dev.type == "cpu" else f"{torch.cuda.get_device_name(dev)} ({dev})",
    }
    summary.update(facts)
    if dev.type == "cuda":  # TorchTitan's memory numbers
        summary["max_active_bytes"] = torch.cuda.memory_stats(dev)["active_bytes.all.peak"]
        summary["max_reserved_bytes"] = torch.cuda.max_memory_reserved(dev)
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        log(
            f"summary: tps median {summary['tps_median']:,.0f} (p10 {summary['tps_p10']:,.0f}, "
            f"p90 {summary['tps_p90']:,.0f}) step time median {summary['step_time_median_s']:.3f}s "
            f"over {len(measured)} steps; final loss {summary['final_loss']:.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
