// The safetensors file format (Hugging Face): an 8-byte little-endian
// header length N, N bytes of JSON header
//   {"<name>": {"dtype": "F32", "shape": [a, b], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"format": "pt"}}
// then the tensors' raw little-endian bytes; data_offsets count from the
// end of the header. No Debian library reads or writes it, so this does,
// with nlohmann_json for the header.
//
// Reading checks the whole header against the file before any tensor is
// used: a header length past the file's end, a header that is not a JSON
// object, an unknown dtype, data_offsets past the end, an extent that is not
// numel x dtype size, or two tensors sharing bytes is an InputError naming
// the file and the tensor. Tensors are views of a private memory map (no
// copy, writes never reach the file); they stay valid while the
// SafetensorsFile lives.
//
// Not thread-safe; one reader or writer per file.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

// "F32", "BF16", "F16", "F64", "I64", "I32" <-> ATen dtypes: an unknown
// name gives nullopt, an unknown dtype std::invalid_argument.
std::optional<at::ScalarType> safetensors_dtype(const std::string& name);
std::string safetensors_dtype_name(at::ScalarType t);

class SafetensorsFile {
 public:
  struct Entry {
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // byte range relative to the data section
  };
  explicit SafetensorsFile(const std::string& path);  // InputError on a bad file
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;
  // A CPU tensor over the mapped bytes (copied only when misaligned for its dtype).
  at::Tensor tensor(const std::string& name) const;
  const nlohmann::json& metadata() const { return metadata_; }

 private:
  std::string path_;
  std::map<std::string, Entry> entries_;
  nlohmann::json metadata_ = nlohmann::json::object();
  void* map_ = nullptr;
  size_t map_size_ = 0;
  int64_t data_start_ = 0;
};

// Writes one safetensors file tensor by tensor: the header is fixed by the
// (name, dtype, shape) list given up front, then add() takes the tensors in
// that order. finish() checks that all were written and fsyncs the file.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                    const nlohmann::json& metadata = {{"format", "pt"}});
  void add(const at::Tensor& t);  // the next spec's tensor: its dtype and shape
  void finish();

  static int64_t nbytes(const Spec& s);

 private:
  std::string path_;
  std::vector<Spec> specs_;
  size_t next_ = 0;
  std::ofstream out_;
};

}  // namespace ctitan
