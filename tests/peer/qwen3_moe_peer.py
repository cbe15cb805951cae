#!/usr/bin/env python3
"""Python peer benchmark for ctitan: Qwen3 MoE trained by eager PyTorch / torch.compile.

Self-contained (torch only; no torchtitan import). The training loop, AdamW, the LR
schedule, the loss and the mixed-precision layers come from llama_peer.py (same
directory); this file re-states TorchTitan v0.2.2's Qwen3 MoE model
(torchtitan/models/qwen3/{__init__,model/model,model/args}.py and
torchtitan/models/moe/{moe,utils,kernels}.py):

  * debugmodel_moe: vocab 2048, dim 256, 8 layers, 16 heads, 8 kv heads, head_dim 128
    (decoupled from dim/heads), norm eps 1e-6, output NOT tied to the embedding,
    every layer an MoE: 64 experts, top 8, expert hidden 768, no shared experts;
  * attention: wq/wk/wv/wo without bias, q_norm/k_norm (RMSNorm over head_dim) on q
    and k before RoPE, RoPE theta 1e6 in rotate_half layout (cos|sin cache cast to the
    activations' dtype), SDPA (is_causal, scale head_dim^-0.5, enable_gqa) under
    sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, MATH]) as TorchTitan's wrapper;
  * router (TokenChoiceTopKRouter): gate = Linear(dim, E) without bias, softmax in
    fp32, choice on scores + expert_bias, topk(sorted=False), gate weights = the chosen
    scores / (their sum + 1e-20) (route_norm) * route_scale 1.0;
  * dispatch: tokens sorted by expert (argsort stable), gathered x[idx // top_k],
    experts, then unsorted by index assignment and combined by
    bmm(top_scores [N,1,k], outputs.float() [N,k,D]).to(x.dtype)
    (score_before_experts False; TorchTitan v0.2.2 does not use scatter_add here);
  * experts (GroupedExperts, use_grouped_mm True = TorchTitan's default): the
    indices_padding_wrapper pads every expert's group to a multiple of 8 rows (an
    empty expert gets 8) with index -1 pointing at an appended zero row, then
    torch._grouped_mm three times with x and w1/w2/w3 cast to bf16 (TorchTitan casts
    to bf16 here whatever the training dtype, so even --dtype fp32 runs the experts in
    bf16), output cast back to x's dtype. torch._grouped_mm runs on CPU in this torch
    build (fp32 and bf16, forward and backward), so "grouped_mm" is the default;
    --experts for_loop selects TorchTitan's _run_experts_for_loop (one matmul per
    expert, in the activations' dtype, no padding). The padding indices are made
    with torch ops here (TorchTitan's generate_permute_indices uses a Triton kernel,
    GPU only); torch.histc on int64 has no CPU kernel, so the expert counts are
    histc over the indices as float, cast to int64 (the same counts);
  * load balancing: MoEArgs' load_balance_coeff 1e-3 makes TorchTitan register the
    expert_bias (persistent) and tokens_per_expert buffers, but Qwen3's TrainSpec
    uses build_optimizers, not build_optimizers_with_moe_load_balancing, so no
    optimizer pre-hook updates the bias: it stays zero and tokens_per_expert only
    accumulates. This peer does the same (no bias update);
  * init as TorchTitan (depth_init): embedding N(0,1); wq/wk/wv, experts' w1
    trunc_normal std 0.02; wo, experts' w2/w3, router gate std 0.02/sqrt(2(l+1));
    norms ones; output trunc_normal std dim^-0.5 cut at 3 std;
  * nparams / flops_per_token as get_moe_model_nparams_and_flops: 6*(N_active - N_emb)
    + 6*L*H*(2*head_dim)*S, N_active counting top_k/E of the routed experts.

--mode compile follows TorchTitan's apply_compile for MoE blocks: every child of a
block is compiled (fullgraph) except the MoE, of which the router and the reorderer
are compiled but not the experts module (padding, dispatch and combine stay eager);
the grouped_mm expert function is compiled on its own (the for-loop path is not).

Training loop, --dtype and --json: exactly llama_peer.py's (AdamW fused lr 8e-4,
betas (0.9, 0.95), eps 1e-8, wd 0.1; linear warmup then linear decay; clip 1.0;
synthetic uniform tokens; bf16 = FSDP2-style param_dtype bf16 over fp32 masters).

--steps 0 builds the model on the meta device only, prints (and for debugmodel_moe
asserts) the parameter count, and exits.

Examples:
  .venv/bin/python tests/peer/qwen3_moe_peer.py --flavor debugmodel_moe --steps 0
  .venv/bin/python tests/peer/qwen3_moe_peer.py --flavor tiny_moe --steps 3 --warmup 1 --threads 1
  .venv/bin/python tests/peer/qwen3_moe_peer.py --flavor debugmodel_moe --batch 4 --seq-len 256 \\
      --dtype bf16 --mode eager --steps 12 --warmup 2 --json
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_peer as lp  # noqa: E402  (training pieces and mixed-precision layers)

DEBUGMODEL_MOE_NPARAMS = 315_758_848  # ctitan's hand-checked count (docs/models.md)
TOKEN_GROUP_ALIGN_SIZE_M = 8  # torchtitan/models/moe/utils.py


# ----------------------------------------------------------------------------- args


@dataclass
class MoEArgs:
    num_experts: int = 64
    num_shared_experts: int = 0
    score_func: str = "softmax"
    route_norm: bool = True
    route_scale: float = 1.0
    score_before_experts: bool = False
    top_k: int = 8
    load_balance_coeff: float | None = 1e-3  # buffers only: no bias update for Qwen3


@dataclass
class Qwen3Args:
    dim: int = 256
    n_layers: int = 8
    n_heads: int = 16
    n_kv_heads: int = 8
    vocab_size: int = 2048
    head_dim: int = 128
    norm_eps: float = 1e-6
    rope_theta: float = 1e6
    max_seq_len: int = 4096  # TorchTitan overwrites this with training.seq_len
    depth_init: bool = True
    moe_inter_dim: int = 768
    moe: MoEArgs = field(default_factory=MoEArgs)


FLAVORS: dict[str, Qwen3Args] = {
    # ctitan's tiny_moe (trainer/models/qwen3.cpp): head_dim 16 decoupled from dim/heads
    "tiny_moe": Qwen3Args(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, head_dim=16,
                          moe_inter_dim=16, moe=MoEArgs(num_experts=4, top_k=2)),
    # TorchTitan v0.2.2 qwen3 "debugmodel_moe"
    "debugmodel_moe": Qwen3Args(dim=256, n_layers=8, n_heads=16, n_kv_heads=8, vocab_size=2048,
                                moe_inter_dim=768, moe=MoEArgs(num_experts=64, top_k=8)),
    # TorchTitan v0.2.2 qwen3 "30B-A3B" (parameter counts on the meta device only)
    "30B-A3B": Qwen3Args(dim=2048, n_layers=48, n_heads=32, n_kv_heads=4, vocab_size=151936,
                         moe_inter_dim=768, moe=MoEArgs(num_experts=128, top_k=8)),
}


# ----------------------------------------------------------------------------- rope


def precompute_rope_cache(dim: int, max_seq_len: int, base: float) -> torch.Tensor:
    """[max_seq_len, 2*dim]: cos of [θ, θ] then sin of [θ, θ] (rotate_half layout)."""
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = torch.arange(max_seq_len, dtype=freqs.dtype, device=freqs.device)
    idx_theta = torch.outer(t, freqs).float()
    freqs = torch.cat([idx_theta, idx_theta], dim=-1)
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_emb(xq: torch.Tensor, xk: torch.Tensor, rope_cache: torch.Tensor):
    _, seqlen, _, head_dim = xq.shape
    rc = rope_cache[0:seqlen].view(1, seqlen, 1, head_dim * 2)
    cos = rc[..., :head_dim].to(dtype=xq.dtype)
    sin = rc[..., head_dim:].to(dtype=xq.dtype)
    xq_out = (xq * cos) + (rotate_half(xq) * sin)
    xk_out = (xk * cos) + (rotate_half(xk) * sin)
    return xq_out.type_as(xq), xk_out.type_as(xk)


# ----------------------------------------------------------------------------- attention

_SDPA_BACKENDS = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


class Attention(nn.Module):
    def __init__(self, a: Qwen3Args, pd: torch.dtype | None):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = a.n_heads, a.n_kv_heads, a.head_dim
        self.scaling = a.head_dim**-0.5
        self.enable_gqa = a.n_heads > a.n_kv_heads
        self.q_norm = lp.RMSNorm(a.head_dim, a.norm_eps, pd)
        self.k_norm = lp.RMSNorm(a.head_dim, a.norm_eps, pd)
        self.wq = lp.Linear(a.dim, a.n_heads * a.head_dim, pd)
        self.wk = lp.Linear(a.dim, a.n_kv_heads * a.head_dim, pd)
        self.wv = lp.Linear(a.dim, a.n_kv_heads * a.head_dim, pd)
        self.wo = lp.Linear(a.n_heads * a.head_dim, a.dim, pd)

    def init_weights(self, init_std: float):
        for linear in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(linear.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)
        self.q_norm.reset_parameters()
        self.k_norm.reset_parameters()

    def forward(self, x, rope_cache):
        bs, seqlen, _ = x.shape
        xq = self.wq(x).view(bs, seqlen, -1, self.head_dim)
        xk = self.wk(x).view(bs, seqlen, -1, self.head_dim)
        xv = self.wv(x).view(bs, seqlen, -1, self.head_dim)
        xq, xk = self.q_norm(xq), self.k_norm(xk)
        xq, xk = apply_rotary_emb(xq, xk, rope_cache)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        with sdpa_kernel(_SDPA_BACKENDS, set_priority=True):
            out = F.scaled_dot_product_attention(
                xq, xk, xv, scale=self.scaling, is_causal=True, enable_gqa=self.enable_gqa
            )
        out = out.transpose(1, 2).contiguous().view(bs, seqlen, -1)
        return self.wo(out)


# ----------------------------------------------------------------------------- experts


def _run_experts_for_loop(w1, w2, w3, x, num_tokens_per_expert):
    """TorchTitan's for-loop path: one matmul chain per expert, host sync on the counts."""
    counts = num_tokens_per_expert.tolist()
    num_padding = x.shape[0] - sum(counts)
    x_splits = torch.split(x[: sum(counts)], split_size_or_sections=counts, dim=0)
    outs = []
    for e, xe in enumerate(x_splits):
        h = F.silu(torch.matmul(xe, w1[e].transpose(-2, -1)))
        h = h * torch.matmul(xe, w3[e].transpose(-2, -1))
        outs.append(torch.matmul(h, w2[e].transpose(-2, -1)))
    out = torch.cat(outs, dim=0)
    return torch.vstack((out, out.new_zeros((num_padding, out.shape[-1]))))


def _run_experts_grouped_mm(w1, w2, w3, x, num_tokens_per_expert):
    """TorchTitan's grouped_mm path: bf16 whatever the training dtype."""
    offsets = torch.cumsum(num_tokens_per_expert, dim=0, dtype=torch.int32)
    h = F.silu(torch._grouped_mm(x.bfloat16(), w1.bfloat16().transpose(-2, -1), offs=offsets))
    h = h * torch._grouped_mm(x.bfloat16(), w3.bfloat16().transpose(-2, -1), offs=offsets)
    return torch._grouped_mm(h, w2.bfloat16().transpose(-2, -1), offs=offsets).type_as(x)


_run_experts_grouped_mm_impl = _run_experts_grouped_mm  # replaced by its compiled form in --mode compile


def _permute_indices(num_tokens_per_expert: torch.Tensor, n_rows: int, max_len: int, alignment: int):
    """generate_permute_indices for one rank (ep_degree 1), in torch ops: each expert's
    rows at an aligned write offset, every other slot -1. Returns (indices, m_sizes)."""
    counts = num_tokens_per_expert
    start = torch.cumsum(counts, 0) - counts
    m_sizes = ((torch.clamp_min(counts, alignment) + alignment - 1) // alignment * alignment).to(torch.int32)
    write_offsets = torch.cumsum(m_sizes, 0) - m_sizes
    expert_of_row = torch.repeat_interleave(
        torch.arange(counts.numel(), device=counts.device), counts, output_size=n_rows
    )
    rows = torch.arange(n_rows, device=counts.device)
    dest = write_offsets[expert_of_row] + rows - start[expert_of_row]
    permuted = torch.full((max_len,), -1, dtype=torch.int32, device=counts.device)
    permuted[dest] = rows.to(torch.int32)
    return permuted, m_sizes


def _run_experts_grouped_mm_padded(w1, w2, w3, x, num_tokens_per_expert):
    """indices_padding_wrapper(_run_experts_grouped_mm) without EP."""
    num_local_experts = w1.shape[0]
    n_rows = x.shape[0]
    padded_max_len = _round_up(n_rows + num_local_experts * TOKEN_GROUP_ALIGN_SIZE_M, TOKEN_GROUP_ALIGN_SIZE_M)
    with torch.no_grad():
        permuted, m_sizes = _permute_indices(num_tokens_per_expert, n_rows, padded_max_len, TOKEN_GROUP_ALIGN_SIZE_M)
    x = torch.vstack((x, x.new_zeros((x.shape[-1]))))
    input_shape = x.shape
    x = x[permuted, :]
    out = _run_experts_grouped_mm_impl(w1, w2, w3, x, m_sizes)
    out_unpermuted = out.new_empty(input_shape)
    out_unpermuted[permuted, :] = out
    return out_unpermuted[:-1]


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


class GroupedExperts(nn.Module):
    def __init__(self, dim: int, hidden: int, num_experts: int, impl: str, pd: torch.dtype | None):
        super().__init__()
        self.num_experts = num_experts
        self.w1 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.w2 = nn.Parameter(torch.empty(num_experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(num_experts, hidden, dim))
        self.impl = impl
        self.param_dtype = pd

    def forward(self, x, num_tokens_per_expert):
        w1, w2, w3 = (lp._cast(w, self.param_dtype) for w in (self.w1, self.w2, self.w3))
        if self.impl == "grouped_mm":
            return _run_experts_grouped_mm_padded(w1, w2, w3, x, num_tokens_per_expert)
        return _run_experts_for_loop(w1, w2, w3, x, num_tokens_per_expert)

    def init_weights(self, init_std: float):
        nn.init.trunc_normal_(self.w1, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.w2, mean=0.0, std=init_std)
        nn.init.trunc_normal_(self.w3, mean=0.0, std=init_std)


def _expert_counts(indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    # TorchTitan: torch.histc(indices, bins=E, min=0, max=E) on int64 (CUDA). CPU histc has
    # no integer kernel: same bins over the indices as float, counts back to int64.
    return torch.histc(indices.view(-1).float(), bins=num_experts, min=0, max=num_experts).to(torch.int64)


class TokenChoiceTopKRouter(nn.Module):
    def __init__(self, dim: int, m: MoEArgs, pd: torch.dtype | None):
        super().__init__()
        self.gate = lp.Linear(dim, m.num_experts, pd)
        self.num_experts, self.top_k = m.num_experts, m.top_k
        self.score_func, self.route_norm, self.route_scale = m.score_func, m.route_norm, m.route_scale

    def forward(self, x, expert_bias):
        scores = self.gate(x)
        if self.score_func == "sigmoid":
            scores = torch.sigmoid(scores.to(torch.float32))
        else:
            scores = F.softmax(scores.to(torch.float32), dim=1)
        scores_for_choice = scores if expert_bias is None else scores + expert_bias
        _, selected = torch.topk(scores_for_choice, k=self.top_k, dim=-1, sorted=False)
        top_scores = scores.gather(dim=1, index=selected)
        if self.route_norm:
            top_scores = top_scores / (top_scores.sum(dim=-1, keepdim=True) + 1e-20)
        top_scores = top_scores * self.route_scale
        return top_scores, selected, _expert_counts(selected, self.num_experts)

    def init_weights(self, init_std: float):
        nn.init.trunc_normal_(self.gate.weight, mean=0.0, std=init_std)


class TokenReorderer(nn.Module):
    def __init__(self, num_experts: int, top_k: int):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k

    def forward(self, top_scores, selected):
        num_tokens_per_expert = _expert_counts(selected, self.num_experts)
        token_indices_sorted = torch.argsort(selected.view(-1), stable=True)
        return top_scores.view(-1)[token_indices_sorted], token_indices_sorted, num_tokens_per_expert


class MoE(nn.Module):
    def __init__(self, a: Qwen3Args, impl: str, pd: torch.dtype | None):
        super().__init__()
        m = a.moe
        if m.num_shared_experts:
            raise NotImplementedError("shared experts: not in Qwen3's flavors")
        self.experts = GroupedExperts(a.dim, a.moe_inter_dim, m.num_experts, impl, pd)
        self.router = TokenChoiceTopKRouter(a.dim, m, pd)
        self.reorderer = TokenReorderer(m.num_experts, m.top_k)
        self.score_before_experts = m.score_before_experts
        self.top_k = m.top_k
        self.load_balance_coeff = m.load_balance_coeff
        if self.load_balance_coeff is not None:
            self.register_buffer("expert_bias", torch.zeros(m.num_experts, dtype=torch.float32), persistent=True)
        else:
            self.expert_bias = None
        self.register_buffer("tokens_per_expert", torch.zeros(m.num_experts, dtype=torch.float32), persistent=False)

    def forward(self, x):
        bs, slen, dim = x.shape
        x = x.view(-1, dim)
        top_scores, selected, num_tokens_per_expert = self.router(x, self.expert_bias)
        with torch.no_grad():
            self.tokens_per_expert.add_(num_tokens_per_expert)
        top_scores_sorted, token_indices_sorted, num_tokens_per_expert = self.reorderer(top_scores, selected)
        routed_input = x[token_indices_sorted // self.top_k]
        if self.score_before_experts:
            routed_input = (routed_input.to(torch.float32) * top_scores_sorted.reshape(-1, 1)).to(x.dtype)
        routed_output = self.experts(routed_input, num_tokens_per_expert)
        unsorted = torch.zeros(
            (bs * slen * self.top_k, dim), dtype=routed_output.dtype, device=routed_output.device
        )
        unsorted[token_indices_sorted] = routed_output
        unsorted = unsorted.reshape(-1, self.top_k, dim)
        if not self.score_before_experts:
            out = torch.bmm(top_scores.reshape(-1, 1, self.top_k), unsorted.float()).to(x.dtype).squeeze(1)
        else:
            out = unsorted.sum(dim=1)
        return out.reshape(bs, slen, dim)

    def init_weights(self, init_std: float, buffer_device: torch.device):
        self.experts.init_weights(init_std)
        self.router.init_weights(init_std)
        with torch.device(buffer_device):
            self.tokens_per_expert = torch.zeros(self.experts.num_experts, dtype=torch.float32)
            if self.load_balance_coeff is not None:
                self.expert_bias = torch.zeros(self.experts.num_experts, dtype=torch.float32)


# ----------------------------------------------------------------------------- model


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, a: Qwen3Args, impl: str, pd: torch.dtype | None):
        super().__init__()
        self.attention = Attention(a, pd)
        self.moe_enabled = True
        self.moe = MoE(a, impl, pd)
        self.attention_norm = lp.RMSNorm(a.dim, a.norm_eps, pd)
        self.ffn_norm = lp.RMSNorm(a.dim, a.norm_eps, pd)
        if a.depth_init:
            self.weight_init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5
        else:
            self.weight_init_std = 0.02 / (2 * a.n_layers) ** 0.5

    def forward(self, x, rope_cache):
        x = x + self.attention(self.attention_norm(x), rope_cache)
        return x + self.moe(self.ffn_norm(x))

    def init_weights(self, buffer_device: torch.device):
        for norm in (self.attention_norm, self.ffn_norm):
            norm.reset_parameters()
        self.attention.init_weights(self.weight_init_std)
        self.moe.init_weights(self.weight_init_std, buffer_device)


class Qwen3Model(nn.Module):
    def __init__(self, a: Qwen3Args, impl: str = "grouped_mm", param_dtype: torch.dtype | None = None):
        super().__init__()
        self.model_args = a
        self.tok_embeddings = lp.Embedding(a.vocab_size, a.dim, param_dtype)
        self.register_buffer("rope_cache", self._precompute_rope_cache(), persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, a, impl, param_dtype) for i in range(a.n_layers)})
        self.norm = lp.RMSNorm(a.dim, a.norm_eps, param_dtype)
        self.output = lp.Linear(a.dim, a.vocab_size, param_dtype)  # untied in the MoE flavors

    def _precompute_rope_cache(self) -> torch.Tensor:
        a = self.model_args
        return precompute_rope_cache(a.head_dim, a.max_seq_len, a.rope_theta)

    def init_weights(self, buffer_device: torch.device | None = None):
        buffer_device = buffer_device or self.rope_cache.device
        with torch.device(buffer_device):
            self.rope_cache = self._precompute_rope_cache()
        nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights(buffer_device)
        self.norm.reset_parameters()
        std = self.model_args.dim**-0.5
        nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, self.rope_cache)
        return self.output(self.norm(h))


def nparams_and_flops(model: nn.Module, a: Qwen3Args, seq_len: int) -> tuple[int, int, int]:
    """TorchTitan's get_moe_model_nparams_and_flops (head_dims = 2*head_dim).
    Returns (nparams, nparams_active, flops_per_token)."""
    emb = router = experts = dense = 0
    for name, p in model.named_parameters():
        if "embedding" in name:
            emb += p.numel()
            dense += p.numel()
        elif "moe.router" in name:
            router += p.numel()
        elif "moe.experts" in name:
            experts += p.numel()
        else:
            dense += p.numel()
    active_sparse = router + experts * a.moe.top_k // a.moe.num_experts
    flops = 6 * (dense - emb + active_sparse) + 6 * a.n_layers * a.n_heads * (2 * a.head_dim) * seq_len
    return dense + router + experts, dense + active_sparse, flops


def apply_compile(model: Qwen3Model, impl: str) -> None:
    """TorchTitan's apply_compile (llama4/infra/parallelize.py) for MoE blocks."""
    global _run_experts_grouped_mm_impl
    torch._dynamo.config.capture_scalar_outputs = True
    for _, block in model.layers.named_children():
        for attr, sub in list(block.named_children()):
            if isinstance(sub, MoE):
                for mattr, msub in list(sub.named_children()):
                    if mattr == "experts":
                        continue  # dispatch/combine and padding stay eager, as TorchTitan
                    setattr(sub, mattr, torch.compile(msub, fullgraph=True))
            else:
                setattr(block, attr, torch.compile(sub, fullgraph=True))
    if impl == "grouped_mm":
        _run_experts_grouped_mm_impl = torch.compile(_run_experts_grouped_mm, fullgraph=True)
    # TorchTitan does not compile the for-loop path (pytorch/pytorch#166460).


def grouped_mm_works(device: torch.device) -> bool:
    """torch._grouped_mm forward and backward in bf16 (the dtype TorchTitan's path uses).
    Its operands' row strides must be multiples of 16 bytes (bf16: dims multiple of 8)."""
    try:
        x = torch.randn(16, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(2, 16, 32, device=device, dtype=torch.bfloat16, requires_grad=True)
        offs = torch.tensor([8, 16], dtype=torch.int32, device=device)
        y = torch._grouped_mm(x, w.transpose(-2, -1), offs=offs)
        y.float().sum().backward()
        ref = torch.cat([x[:8] @ w[0].T, x[8:] @ w[1].T]).float()
        return bool(torch.allclose(y.float(), ref, rtol=2e-2, atol=2e-2))
    except (RuntimeError, NotImplementedError, AttributeError):
        return False


# ----------------------------------------------------------------------------- benchmark


def main(argv=None) -> int:
    ap = lp.peer_arguments(FLAVORS, "debugmodel_moe", __doc__,
                           steps_help="0: build on the meta device, print the parameter count, exit")
    ap.add_argument("--experts", default="auto", choices=["auto", "grouped_mm", "for_loop"],
                    help="auto = grouped_mm (TorchTitan's default) if torch._grouped_mm runs here, else for_loop")
    args = ap.parse_args(argv)
    if args.steps < 0 or (args.steps > 0 and args.warmup >= args.steps):
        ap.error("--warmup must be smaller than --steps (or --steps 0 for the parameter count only)")
    threads, log = lp.setup_run(ap, args)

    margs = replace(FLAVORS[args.flavor], moe=replace(FLAVORS[args.flavor].moe))
    if args.n_layers is not None:
        margs.n_layers = args.n_layers
    margs.max_seq_len = args.seq_len  # TorchTitan: update_from_config sets max_seq_len = seq_len
    param_dtype = torch.bfloat16 if args.dtype == "bf16" else None
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if args.device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)

    impl = args.experts
    if impl == "auto":
        impl = "grouped_mm" if grouped_mm_works(dev) else "for_loop"

    with torch.device("meta"):
        model = Qwen3Model(margs, impl, param_dtype)
    nparams, nactive, flops_per_token = nparams_and_flops(model, margs, args.seq_len)
    log(f"qwen3_moe_peer: flavor={args.flavor} params={nparams:,} active={nactive:,} "
        f"(top {margs.moe.top_k} of {margs.moe.num_experts} experts) flops/token={flops_per_token:,}")
    if args.flavor == "debugmodel_moe" and args.n_layers is None:
        assert nparams == DEBUGMODEL_MOE_NPARAMS, f"{nparams} != {DEBUGMODEL_MOE_NPARAMS}"
    if args.steps == 0:
        if args.json:
            print(json.dumps({"flavor": args.flavor, "n_layers": margs.n_layers, "nparams": nparams,
                              "nparams_active": nactive, "flops_per_token": flops_per_token,
                              "experts": impl}), flush=True)
        return 0

    model.to_empty(device=dev)
    with torch.no_grad():
        model.init_weights(buffer_device=dev)
    model.train()

    fwd = model
    if args.mode == "compile":
        apply_compile(model, impl)  # TorchTitan's per-block compile (the model itself is not wrapped)
    # Qwen3 in TorchTitan v0.2.2: no expert-bias pre-hook before the optimizer step.
    return lp.train_and_report("qwen3_moe_peer", model, fwd, margs.vocab_size, args, dev, threads,
                               {"flavor": args.flavor, "n_layers": margs.n_layers, "nparams": nparams,
                                "nparams_active": nactive, "flops_per_token": flops_per_token, "experts": impl})


if __name__ == "__main__":
    sys.exit(main())
