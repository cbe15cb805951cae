// Where each parameter lives, decided before any buffer exists: the
// placement plan of one rank.
//
// A ParamSpec is one parameter as this rank stores it: its TorchTitan FQN,
// its global shape, the shape of this rank's storage, the box of the global
// tensor that storage holds (offset and sizes in every dimension), and the
// placement over each mesh dimension it is laid out on (DTensor's Shard(d)
// or Replicate()). The model definition starts from whole parameters
// (whole_param); each parallelism pass narrows the box — FSDP's Shard(0)
// takes ceil(rows / N) rows of the current box per rank, zero-padded, so a
// rank's storage may be larger than its box (the padding is never read).
//
// Everything downstream reads the spec: allocation (storage shape), init
// (param_init.h fills the box from global coordinates), checkpoints (the
// box is the saved piece), the layout print and the gradient norm (which
// ranks count a value once).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctitan {

struct Placement {
  std::string mesh_dim;   // "dp_shard", "dp_replicate", later "tp", "pp", "cp"
  int64_t degree = 1;     // the mesh dimension's size
  int shard_dim = -1;     // the tensor dimension split over mesh_dim; -1: Replicate()
  bool replicated() const { return shard_dim < 0; }
  std::string describe() const;  // "Shard(0) over dp_shard 4", "Replicate() over dp_replicate 2"
};

struct ParamSpec {
  std::string name;                    // TorchTitan FQN
  std::vector<int64_t> global_shape;
  std::vector<int64_t> shape;          // this rank's storage
  std::vector<int64_t> box_offset;     // global coordinates of the box's first element
  std::vector<int64_t> box_shape;      // the box: storage minus padding (0 rows: nothing here)
  std::vector<Placement> placements;   // mesh dimensions of size > 1 it is laid out on
  int64_t numel = 0;                   // elements of storage

  int64_t box_numel() const;
  // "fqn  global [a, b]  local [c, b]  Shard(0) over dp_shard 4" (placements
  // joined by ", "; "Replicate()" when it is on no mesh dimension).
  std::string describe() const;
};

// A whole parameter of `shape` (one rank holds all of it).
ParamSpec whole_param(std::string name, std::vector<int64_t> shape);

// FSDP2's Shard(0) over mesh dimension `mesh_dim` of size n, as rank r of
// it: rows [r·c, (r+1)·c) of the current box, c = ceil(rows / n); the
// storage keeps c rows (zero padding past the box's end). n = 1: unchanged.
ParamSpec shard_rows(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r);
// The same along dimension `dim` (FSDP2's Shard(dim) from a
// shard_placement_fn: TorchTitan's experts when there are fewer local
// experts than FSDP ranks).
ParamSpec shard_padded(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r, int dim);

// Tensor parallelism's Shard(dim) over mesh dimension `mesh_dim` of size n,
// as rank r of it: an even split of the current box along `dim` (no
// padding: TP needs the size divisible, InputError naming the parameter
// and the numbers otherwise). n = 1: unchanged.
ParamSpec shard_even(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r, int dim);
// Replicate() over mesh dimension `mesh_dim` of size n (n = 1: unchanged).
ParamSpec replicate(ParamSpec s, const std::string& mesh_dim, int64_t n);

// "[a, b, c]"
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace ctitan
