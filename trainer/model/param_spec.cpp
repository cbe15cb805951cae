#include "trainer/model/param_spec.h"

#include <algorithm>

#include "common/errors.h"

namespace ctitan {

std::string Placement::describe() const {
  return (replicated() ? std::string("Replicate()") : "Shard(" + std::to_string(shard_dim) + ")") + " over " +
         mesh_dim + " " + std::to_string(degree);
}

int64_t ParamSpec::box_numel() const {
  int64_t n = 1;
  for (int64_t s : box_shape) n *= s;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string ParamSpec::describe() const {
  std::string where;
  for (const auto& p : placements) where += (where.empty() ? "" : ", ") + p.describe();
  return name + "  global " + shape_str(global_shape) + "  local " + shape_str(shape) + "  " +
         (where.empty() ? "Replicate()" : where);
}

ParamSpec whole_param(std::string name, std::vector<int64_t> shape) {
  ParamSpec s;
  s.name = std::move(name);
  s.global_shape = s.shape = s.box_shape = shape;
  s.box_offset.assign(shape.size(), 0);
  s.numel = 1;
  for (int64_t d : shape) s.numel *= d;
  return s;
}

ParamSpec shard_rows(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r) {
  return shard_padded(std::move(s), mesh_dim, n, r, 0);
}

ParamSpec shard_padded(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r, int dim) {
  if (n == 1) return s;
  const auto d = static_cast<size_t>(dim);
  const int64_t size = s.box_shape.at(d), chunk = (size + n - 1) / n;
  const int64_t valid = std::clamp(size - r * chunk, int64_t{0}, chunk);
  s.box_offset[d] += std::min(r * chunk, size);
  s.box_shape[d] = valid;
  s.numel = s.numel / s.shape[d] * chunk;
  s.shape[d] = chunk;
  s.placements.push_back({mesh_dim, n, dim});
  return s;
}

ParamSpec shard_even(ParamSpec s, const std::string& mesh_dim, int64_t n, int64_t r, int dim) {
  if (n == 1) return s;
  const auto d = static_cast<size_t>(dim);
  const int64_t size = s.box_shape.at(d);
  if (size % n != 0)
    throw InputError(s.name + ": dimension " + std::to_string(dim) + " of size " + std::to_string(size) +
                     " does not split evenly over " + mesh_dim + " " + std::to_string(n));
  const int64_t chunk = size / n;
  s.box_offset[d] += r * chunk;
  s.box_shape[d] = chunk;
  s.numel = s.numel / s.shape[d] * chunk;
  s.shape[d] = chunk;
  s.placements.push_back({mesh_dim, n, dim});
  return s;
}

ParamSpec replicate(ParamSpec s, const std::string& mesh_dim, int64_t n) {
  if (n > 1) s.placements.push_back({mesh_dim, n, -1});
  return s;
}

}  // namespace ctitan
