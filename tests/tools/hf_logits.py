#!/usr/bin/env python3
"""transformers' side of ctitan's Hugging Face checkpoint tests.

  hf_logits.py random FLAVOR OUT_DIR SEED   a random LlamaForCausalLM shaped like ctitan's
                                            llama3 FLAVOR (tiny | debugmodel), or a random
                                            Qwen3ForCausalLM / Qwen3MoeForCausalLM for FLAVOR
                                            qwen3:tiny | qwen3:tiny_moe | qwen3:debugmodel, or a
                                            random DeepseekV3ForCausalLM for deepseek_v3:tiny (with
                                            a random e_score_correction_bias), or a random
                                            GptOssForCausalLM for gpt_oss:tiny; save_pretrained
  hf_logits.py logits MODEL_DIR OUT B S     load MODEL_DIR in float32, run a fixed [B, S] token
                                            batch, save {"tokens", "logits"} as safetensors

The flavors' numbers are written out here from trainer/models/llama3.cpp,
qwen3.cpp, deepseek_v3.cpp and gpt_oss.cpp (TorchTitan's definitions), not read from ctitan, so a wrong
config.json or a wrong name/permutation on ctitan's side shows up as different
logits.
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM, GptOssConfig,
                          GptOssForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

# dim, layers, heads, kv heads, vocab, ffn hidden (TorchTitan's rule), as ctitan's flavors.
FLAVORS = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 vocab_size=64, intermediate_size=96),
    "debugmodel": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=16, num_key_value_heads=16,
                       vocab_size=2048, intermediate_size=768),
}
# Every ctitan flavor: norm eps 1e-5, rope theta 500000, Llama 3.1 rope scaling.
COMMON = dict(rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=131072, tie_word_embeddings=False,
              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
              attention_bias=False, mlp_bias=False, hidden_act="silu")


# Qwen3 (TorchTitan's qwen3 flavors and ctitan's tiny ones): head_dim decoupled,
# QK-norm, RoPE theta 1e6 without scaling, norm eps 1e-6.
QWEN3_COMMON = dict(rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=40960, attention_bias=False,
                    hidden_act="silu")
QWEN3 = {
    "tiny": (Qwen3Config, Qwen3ForCausalLM,
             dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  vocab_size=64, intermediate_size=64, tie_word_embeddings=False)),
    "tiny_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                 dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                      vocab_size=64, intermediate_size=64, tie_word_embeddings=False, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True, decoder_sparse_step=1,
                      mlp_only_layers=[])),
    "debugmodel": (Qwen3Config, Qwen3ForCausalLM,
                   dict(hidden_size=256, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8,
                        head_dim=128, vocab_size=2048, intermediate_size=3072, tie_word_embeddings=True)),
}

# DeepSeek-V3, ctitan's tiny flavor: multi-head latent attention with the
# low-rank q, RoPE θ 1e4 on interleaved pairs with YaRN (factor 4, original
# length 32, β 32/1, mscale 1), one dense layer then MoE layers of 4 routed
# experts in 2 groups (best 1 group, top 2, sigmoid, normalised, scale 2.5)
# and one shared expert; norm eps 1e-5.
DEEPSEEK_V3 = {
    "tiny": dict(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=3,
                 first_k_dense_replace=1, num_attention_heads=2, num_key_value_heads=2, q_lora_rank=16,
                 kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=4,
                 n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, norm_topk_prob=True,
                 routed_scaling_factor=2.5, rms_norm_eps=1e-5, rope_interleave=True, max_position_embeddings=128,
                 tie_word_embeddings=False, attention_bias=False, hidden_act="silu",
                 rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                  "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0,
                                  "mscale": 1.0, "mscale_all_dim": 1.0}),
}

# GPT-OSS, ctitan's tiny flavor: 4 heads of 16 at dim 48, 2 KV heads, biases
# on q/k/v/o, sinks, a window of 8 on layer 0, RoPE θ 150000 with YaRN (factor
# 32, β 32/1, original 4096, unrounded) in rotate_half's layout, 4 experts top
# 2 with biases, SwiGLU clamped at 0.05 (α 1.702), norm eps 1e-5.
GPT_OSS = {
    "tiny": dict(vocab_size=64, hidden_size=48, intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                 layer_types=["sliding_attention", "full_attention"], swiglu_limit=0.05, swiglu_alpha=1.702,
                 rms_norm_eps=1e-5, attention_bias=True, tie_word_embeddings=False, max_position_embeddings=131072,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096}),
}


def build(flavor):
    if flavor.startswith("gpt_oss:"):
        return GptOssForCausalLM(GptOssConfig(**GPT_OSS[flavor[len("gpt_oss:"):]]))
    if flavor.startswith("deepseek_v3:"):
        return DeepseekV3ForCausalLM(DeepseekV3Config(**DEEPSEEK_V3[flavor[len("deepseek_v3:"):]]))
    if flavor.startswith("qwen3:"):
        config, model, shape = QWEN3[flavor[len("qwen3:"):]]
        return model(config(**shape, **QWEN3_COMMON))
    return LlamaForCausalLM(LlamaConfig(**FLAVORS[flavor], **COMMON))


def tokens(vocab, batch, seq):
    return ((torch.arange(batch * seq, dtype=torch.int64) * 7919 + 13) % vocab).view(batch, seq)


def random_model(flavor, out_dir, seed):
    torch.manual_seed(int(seed))
    model = build(flavor).float()
    with torch.no_grad():  # larger than init's 0.02, so that every weight moves the logits
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 1.0 / p.shape[1] ** 0.5 if "embed" not in name else 1.0)
        for name, b in model.named_buffers():  # DeepSeek-V3's router bias steers the expert choice
            if name.endswith("e_score_correction_bias"):
                b.normal_(0.0, 0.1)
    model.save_pretrained(out_dir, safe_serialization=True)


def logits(model_dir, out, batch, seq):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    t = tokens(model.config.vocab_size, int(batch), int(seq))
    with torch.no_grad():
        out_logits = model(input_ids=t).logits.float().contiguous()
    save_file({"tokens": t, "logits": out_logits}, out)


if __name__ == "__main__":
    commands = {"random": random_model, "logits": logits}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](*sys.argv[2:])
