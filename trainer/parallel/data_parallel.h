// Data parallelism in TorchTitan's three forms, over the device mesh:
//
//   DDP   data_parallel_replicate_degree > 1: every rank holds the whole fp32
//         master, gradients and AdamW state; after each unit's backward its
//         gradients (one contiguous bucket) are all-reduced asynchronously,
//         so the reduction overlaps the backward of the units before it.
//   FSDP  data_parallel_shard_degree > 1 (ZeRO-3, FSDP2's per-parameter
//         sharding): each rank stores rows [r*c, (r+1)*c) of every parameter
//         (c = ceil(rows / N), zero-padded), its gradient and its AdamW state.
//         A unit's parameters are all-gathered (in the compute dtype: bf16
//         gathered parameters, fp32 master) before its forward, the next
//         unit's gather is issued first (prefetch), the unit is freed after
//         forward per parallelism.fsdp_reshard_after_forward, re-gathered for
//         backward, and its gradients reduce-scattered in fp32.
//   HSDP  both > 1: shard within dp_shard, then all-reduce the gradient
//         shards over dp_replicate.
//
// DataParallel is a set of unit hooks (unit_hooks.h): the unit runner
// (TrainModel) runs the units — Transformer::units(): tok_embeddings, each
// block, norm+output — and backward unit by unit, and calls these hooks at
// each unit's boundaries to gather, free and reduce. With one rank it holds
// the optimizer's view of the model and hooks nothing.
//
// Every rank sees a different slice of the global batch (the data loader's
// dp_rank/dp_world); the loss is the mean over each rank's tokens and the
// reduction averages, so the update equals the single-process one on the
// whole global batch.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainer/distributed/flight_recorder.h"
#include "trainer/distributed/mesh.h"
#include "trainer/model/tensor_piece.h"
#include "trainer/model/transformer.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/unit_hooks.h"

namespace ctitan {

struct DataParallelOptions {
  std::string reshard_after_forward = "default";  // default | always | never
  // [quantize.linear.float8] enable_fsdp_float8_all_gather: the weights of
  // float8 GEMMs travel as e4m3 codes (1 byte) plus one fp32 scale each,
  // quantised on the shard with the global amax (one MAX all-reduce per
  // unit, or one per step with precompute_float8_dynamic_scale_for_fsdp).
  // The gathered codes are the GEMM's float8 weight, bit for bit what
  // quantising the whole bf16 weight gives. Tensorwise recipe, FSDP only.
  bool float8_all_gather = false;
  bool float8_precompute_scales = false;
  // The communicator's flight recorder (may be null): its completed
  // collectives give each step's communication time.
  std::shared_ptr<FlightRecorder> recorder;
};

struct CommTimes {      // since the last take_comm_times(), seconds
  double comm_s = 0;          // some collective in flight (union of issue→completion intervals)
  double exposed_comm_s = 0;  // the training thread blocked waiting for one
  // The same per group: a mesh dimension ("dp_shard", "tp", ...) or "world"
  // (gradient clipping; the stop check between steps is dropped); a flattened group counts under the
  // dimension whose communicator it shares.
  std::map<std::string, double> comm_by_dim, exposed_by_dim;
};

class DataParallel final : public UnitHooks {
 public:
  // The model must have unit storage exactly when dp_shard > 1 (the plan
  // decides before the model allocates). FSDP allocates only this rank's
  // shards; init_weights fills them.
  DataParallel(Transformer& model, DeviceMesh& mesh, DataParallelOptions opts);
  // TorchTitan's init_weights after parallelize: every rank fills its own
  // boxes from (seed, FQN, global index) — no full model is built anywhere.
  void init_weights(uint64_t seed);

  bool sharded() const { return shard_ > 1; }
  std::string describe() const;  // "FSDP 4 (reshard after forward: yes)"

  // The optimizer's view: the fp32 master and its gradient — the whole flat
  // buffers for DDP, this rank's shards for FSDP/HSDP.
  at::Tensor& params();
  at::Tensor& grads();

  // Runs over more than one rank: the unit runner must call the hooks.
  bool needs_hooks() const { return replicate_ * shard_ > 1; }
  // The hooks: gather before a unit's forward and backward (prefetching the
  // next unit), free after (per fsdp_reshard_after_forward), reduce each
  // unit's gradients after its backward — on the last micro-batch of the
  // step (DDP, HSDP's replicate all-reduce) or on each (FSDP's
  // reduce-scatter).
  void before_forward(size_t unit) override;
  void after_forward(size_t unit) override;
  void before_backward(size_t unit) override;
  void after_backward(size_t unit, bool first_micro, bool last_micro) override;
  void after_all_backward(bool last_micro) override;
  // Global L2 norm of the gradients, clipped to max_norm: each value counted
  // once over the world — sharded placements from every rank, replicated
  // ones from the first replica (tp/pp-ready: it reads only placements).
  // With `deferred_coef`, the gradients stay as they are and the clipping
  // coefficient is written there (AdamW::step applies it in its own pass).
  double clip_grad_norm(double max_norm, double* deferred_coef = nullptr);
  // Mean over the data-parallel ranks (the loss TorchTitan logs).
  double dp_mean(double local);
  // After the optimizer: refresh the compute copy (unless the optimizer has
  // written it: give_compute_copy).
  void begin_step(bool after_optimizer_step = false);
  // Offers the flat compute copy to `opt` to write in its steps
  // (ParamStore::compute_for_optimizer; never under FSDP); true if taken.
  bool give_compute_copy(AdamW& opt);
  void reshard_all();  // FSDP: free every gathered unit (after a forward-only pass)
  CommTimes take_comm_times();  // since the last call

  // Checkpoint pieces (see checkpoint.h): whole tensors under DDP, this
  // rank's rows of each parameter and AdamW state under FSDP/HSDP. To save,
  // only the ranks that own a piece return it (DDP: rank 0; HSDP: the first
  // replica); to load, every rank gets all it needs.
  TensorPieces checkpoint_pieces(AdamW& opt, bool for_save);
  // This rank's placement plan: one spec per parameter, in slots() order.
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // Each parameter: FQN, global and local shape, placement.
  std::vector<std::string> layout() const;
  // Bytes of parameters + gradients + optimizer state this rank keeps
  // between steps (AdamW: 2 x params) — 1/N of the model's under FSDP.
  int64_t state_bytes() const;

 private:
  // A parameter in the unit's flat layout viewed as [outer, rows, rest],
  // sharded along `rows` (Shard(0): outer 1; the experts' Shard(1): outer
  // is the local expert count).
  struct ShardedParam {
    int64_t outer = 1, rows = 0, rest = 0, chunk = 0;  // rows per rank: chunk (padded)
    int64_t shard_numel() const { return outer * chunk * rest; }
    int64_t valid(int64_t r) const { return std::clamp(rows - r * chunk, int64_t{0}, chunk); }
    int64_t unit_offset = 0;                // in the unit's flat layout
    int64_t shard_offset = 0;               // in the unit's shard
    std::string name;
    int gemm = -1;               // float8 all-gather: index into gemms_, else -1
    int64_t gather_offset = 0;   // in the unit's code (float8) or high-precision gather shard
  };
  struct Float8Gemm {
    std::string name;
    size_t unit = 0;
    std::vector<size_t> params;  // indices into the unit's params
    at::Tensor scale;            // fp32 [], this step's (precompute) or this gather's
  };
  // One unit's parameters sharded over one group: the unit's dense
  // parameters over shard_dim_, its routed experts (EP) over
  // dp_shard_mod_ep.
  struct UnitShard {
    std::string dim;                // the mesh group it shards over
    int64_t n = 1;                  // that group's size
    double grad_scale = 0;          // 0: the gradient reduce-scatter averages; else it sums, times this
    int64_t offset = 0, numel = 0;  // into the rank's shard buffers
    std::vector<ShardedParam> params;
    at::Tensor gathered;  // all-gather output in flight
    WorkPtr gather;
    bool resident = false;
    // Float8 all-gather: codes of the float8 GEMMs' weights, the rest in the
    // compute dtype, and where the gathered float8 values live.
    std::vector<size_t> gemms;
    int64_t code_numel = 0, hp_numel = 0;
    at::Tensor codes_gathered, float8_data;
    WorkPtr codes_gather;
  };
  void build_shards();
  void unshard(size_t u);   // issue the all-gather (no-op if resident or in flight)
  void wait_unshard(size_t u);
  void issue_gather(UnitShard& us);
  void unpack(UnitShard& us, const at::Tensor& unit);  // waits for the gather, copies into the unit buffer
  void reduce_shard(UnitShard& us, const at::Tensor& full, bool first_micro);
  void reshard(size_t u);
  void reduce_unit(size_t u, bool first_micro, bool last_micro);
  void wait(const WorkPtr& w, const Communicator& group);  // adds the blocked time to `group`'s exposed time
  void plan_float8_gather();
  void compute_float8_scales(const std::vector<size_t>& gemms);  // one MAX all-reduce
  void unshard_float8(size_t u);
  void unpack_float8(size_t u);
  bool reshards_after_forward(size_t u) const;
  // Whether this rank holds the first replica of every group `s` is
  // replicated over (it writes the checkpoint piece, counts in the norm).
  bool first_replica(const ParamSpec& s) const;
  void plan_norm_ranges();

  Transformer& model_;
  DeviceMesh& mesh_;
  DataParallelOptions opts_;
  int64_t replicate_ = 1, shard_ = 1;
  std::string shard_dim_ = "dp_shard";  // the mesh group FSDP shards over ("fsdp" = dp_shard x cp under CP)
  std::vector<ParamSpec> specs_;  // this rank's plan, per slot
  // Per slot: where its storage sits in params()/grads() (offset, numel).
  std::vector<std::pair<int64_t, int64_t>> storage_;
  // The gradient ranges (offset, numel) this rank adds to the global norm;
  // empty when nothing is sharded (the norm is local).
  std::vector<std::pair<int64_t, int64_t>> norm_ranges_;
  std::vector<UnitShard> units_;    // per unit: its dense parameters
  std::vector<UnitShard> experts_;  // per unit: its routed experts under EP (numel 0: none)
  // Per slot: (0 dense / 1 expert, index into that UnitShard's params).
  std::vector<std::pair<int, size_t>> shard_of_;
  std::vector<Float8Gemm> gemms_;
  at::Tensor master_shard_, grad_shard_, compute_shard_;
  struct Pending {  // a reduction in flight and what to do when it is done
    WorkPtr work;
    std::function<void()> finish;
    const Communicator* group;
  };
  std::deque<Pending> pending_;
  void finish_oldest_reduction();
  std::map<std::string, double> exposed_by_dim_;
  uint64_t first_seq_ = 0;  // recorder sequence number where the current step began
};

}  // namespace ctitan
