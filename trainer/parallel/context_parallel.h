// Context parallelism (TorchTitan's context_parallel_degree): every sample's
// sequence is cut across the cp ranks, so a rank holds S/cp tokens of each
// sequence and attention exchanges keys and values between the ranks.
//
// Load balancing (context_parallel_load_balancer): "headtail" cuts the
// sequence into 2·cp chunks and gives rank r chunks r and 2·cp-1-r, so each
// rank has as much causal-attention work as any other (TorchTitan's
// HeadTailLoadBalancer); "none" gives rank r the r-th of cp chunks. Inputs,
// labels and RoPE positions are cut alike (cp_positions).
//
// Attention (context_parallel_rotate_method, TorchTitan's names):
//   allgather  all-gather K and V over cp (KV heads only under GQA; backward
//              reduce-scatters dK, dV);
//   alltoall   the ring: K/V blocks pass around the cp ring (cp-1 steps of
//              send/recv; backward runs the ring the other way, dK/dV
//              returning to their owners).
// Either way each local query chunk attends the key chunks before it
// (wholly) and its own (causally) — the chunks after it are skipped — one
// flash-attention call per chunk pair, merged by their log-sum-exp, with
// the flash backward against the merged result (no mask or score matrix
// kept). Exact: the same softmax over the same keys as one process. On
// devices without ATen's CPU flash kernel, masked attention instead.
// Documents (block_causal) cut the pairs further: a pair runs with its
// document mask, a pair no query's document reaches is skipped. The chunks
// stay where the balancer puts them (headtail or none): as in TorchTitan,
// whose CP shards flex's block mask with the same load balancer.
//
// Not thread-safe (one per rank).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "trainer/dist/comm.h"

namespace ctitan {

struct ContextParallelOptions {
  Communicator* group = nullptr;           // the mesh's cp group; null or size 1: off
  std::string rotate_method = "allgather";  // allgather | alltoall
  std::string load_balancer = "headtail";   // headtail | none
  bool on() const { return group != nullptr && group->size() > 1; }
  int64_t size() const { return on() ? group->size() : 1; }
  int64_t rank() const { return on() ? group->rank() : 0; }
  std::string describe() const;  // "CP 2 (allgather, headtail)"
};

// InputError, one line, for an unknown rotate method or balancer, or a
// seq_len the chunks of `cp` ranks do not divide (2·cp with headtail, cp
// without). The trainer's check, and the sweeps' pruning rule. `seq_key`
// names the key seq_len came from in the message.
void check_context_parallel(const std::string& rotate_method, const std::string& load_balancer, int64_t cp,
                            int64_t seq_len, const std::string& seq_key = "training.seq_len");

// Positions (int64 [seq_len / cp]) of rank `rank`'s tokens in a sequence of
// seq_len, in the order the rank holds them.
at::Tensor cp_positions(const std::string& load_balancer, int64_t cp, int64_t rank, int64_t seq_len);

// This rank's tokens of x [B, S, ...] (dim 1).
at::Tensor cp_shard(const at::Tensor& x, const ContextParallelOptions& cp);

// Causal attention of this rank's queries: q [B, H, Sl, Dh], k [B, K, Sl,
// Dh], v [B, K, Sl, Dv ≤ Dh] (this rank's tokens, K | H), `positions` their
// positions (cp_positions), softmax scale `scale` (default 1/sqrt(Dh));
// returns [B, H, Sl, Dv]. With `starts` (int64 [B, Sl], the document start
// of each of this rank's queries in global positions, documents.h) the
// attention is block_causal: each (query chunk, key chunk) pair runs with
// its document mask, and a pair no query's document reaches is skipped.
at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& positions, const ContextParallelOptions& cp,
                                      std::optional<double> scale = std::nullopt, const at::Tensor& starts = {});

}  // namespace ctitan
