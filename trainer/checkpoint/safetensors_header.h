// The header of a safetensors file (format in safetensors.h), read and
// checked without LibTorch: an 8-byte little-endian length N, N bytes of
// JSON naming every tensor's dtype, shape and byte range. SafetensorsFile
// maps the file and builds its tensors from this; tests/fuzz/ feeds it
// arbitrary bytes.
//
// Every problem is an InputError of one line naming `where` (the file), the
// tensor and what to do: a length past the end of the file, a header that is
// not a JSON object (or nests deeper than kMaxSafetensorsDepth), an unknown
// dtype, a shape that is not integers >= 0 or whose bytes overflow, data
// offsets that are not [begin, end] inside the data section or do not hold
// numel x dtype size bytes, and two tensors sharing bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ctitan {

inline constexpr int kMaxSafetensorsDepth = 64;

struct SafetensorsHeader {
  struct Entry {
    std::string dtype;  // "F32", "BF16", ... (safetensors_element_size knows it)
    std::vector<int64_t> shape;
    int64_t begin = 0, end = 0;  // byte range relative to the data section
  };
  int64_t data_start = 0;  // 8 + header length
  std::map<std::string, Entry> entries;
  nlohmann::json metadata = nlohmann::json::object();  // "__metadata__"
};

// Bytes per element of a safetensors dtype name; nullopt when unknown.
std::optional<int64_t> safetensors_element_size(const std::string& dtype);

// `file` holds the whole file (`size` bytes); only the header is read.
SafetensorsHeader parse_safetensors_header(const unsigned char* file, size_t size, const std::string& where);

}  // namespace ctitan
