// Context parallelism (TorchTitan's context_parallel_degree): every sample's
// sequence is cut across the cp ranks, so a rank holds S/cp tokens of each
// sequence and attention exchanges keys and values between the ranks.
//
// Load balancing (context_parallel_load_balancer): "headtail" cuts the
// sequence into 2·cp chunks and gives rank r chunks r and 2·cp-1-r, so each
// rank has as much causal-attention work as any other (TorchTitan's
// HeadTailLoadBalancer); "none" gives rank r the r-th of cp chunks; "ptrr"
// (TorchTitan's PTRRLoadBalancer for flex attention) cuts the sequence into
// blocks (ptrr_block_size) and deals them by their attention work under the
// batch's documents (ptrr_assignment), a new deal every batch. Inputs,
// labels, document starts and RoPE positions are cut alike (cp_positions()).
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
#include <vector>

#include "trainer/distributed/comm.h"
#include "trainer/model/layout.h"

namespace ctitan {

// InputError, one line, for an unknown rotate method or balancer, or a
// seq_len the chunks of `cp` ranks do not divide (2·cp with headtail, cp
// without, blocks of ptrr_block_size with ptrr). The trainer's check, and the sweeps' pruning rule. `seq_key`
// names the key seq_len came from in the message.
void check_context_parallel(const std::string& rotate_method, const std::string& load_balancer, int64_t cp,
                            int64_t seq_len, const std::string& seq_key = "training.seq_len");

// Positions (int64 [seq_len / cp]) of rank `rank`'s tokens in a sequence of
// seq_len, in the order the rank holds them; ptrr: the rank's blocks of
// `ptrr_blocks` (each rank's, ascending).
at::Tensor cp_positions(const std::string& load_balancer, int64_t cp, int64_t rank, int64_t seq_len,
                        const std::vector<std::vector<int64_t>>& ptrr_blocks = {});

// ptrr: the block length — the largest power of two up to flex attention's
// 128 that cuts seq_len into a multiple of cp blocks, at least 2 per rank;
// 0 when none does.
int64_t ptrr_block_size(int64_t seq_len, int64_t cp);

// PTRR (processing-time round robin; torch's _PTRRLoadBalancer): each block's
// work is its visible (query, key) pairs under the documents `starts`
// [B, S] (documents.h), summed over the batch — a rank's attention work is
// its blocks' over every sample; blocks sorted by work (stable, descending)
// are dealt to the cp ranks in snake order (0..cp-1, then cp-1..0, ...).
// Returns each rank's blocks, ascending.
std::vector<std::vector<int64_t>> ptrr_assignment(const at::Tensor& starts, int64_t cp, int64_t block);

// The cp ranks' attention work (visible pairs, summed over the batch) when
// `load_balancer` cuts a batch with documents `starts` [B, S] over cp ranks
// (ptrr: as `ptrr_blocks` deals it): how balanced a cut is.
std::vector<double> cp_rank_work(const std::string& load_balancer, int64_t cp,
                                 const std::vector<std::vector<int64_t>>& ptrr_blocks, const at::Tensor& starts);

// This rank's tokens of x [B, S, ...] (dim 1).
at::Tensor cp_shard(const at::Tensor& x, const ContextParallelOptions& cp);

// Causal attention of this rank's queries: q [B, H, Sl, Dh], k [B, K, Sl,
// Dh], v [B, K, Sl, Dv ≤ Dh] (this rank's tokens, K | H), `positions` their
// positions (cp_positions), softmax scale `scale` (default 1/sqrt(Dh));
// returns [B, H, Sl, Dv]. With `starts` (int64 [B, Sl], the document start
// of each of this rank's queries in global positions, documents.h) the
// attention is block_causal: each (query chunk, key chunk) pair runs with
// its document mask, and a pair no query's document reaches is skipped.
// With `extras` (sink_attention.h): a sliding window is one more mask on
// each chunk pair, and a pair outside every query's window is skipped like
// one outside every document; the sinks rescale each merged query chunk
// (o · σ(lse − sink)) and get their gradient from the merged output. On
// devices without ATen's CPU flash kernel, every rank's keys and values are
// gathered and the queries attend through sink_window_attention.
at::Tensor context_parallel_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& positions, const ContextParallelOptions& cp,
                                      std::optional<double> scale = std::nullopt, const at::Tensor& starts = {},
                                      const AttentionExtras& extras = {});

}  // namespace ctitan
