#include "trainer/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "common/errors.h"
#include "trainer/checkpoint/safetensors_header.h"

namespace ctitan {
namespace {

const std::vector<std::pair<const char*, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<const char*, at::ScalarType>> t = {
      {"F32", at::kFloat}, {"BF16", at::kBFloat16}, {"F16", at::kHalf}, {"F64", at::kDouble}, {"I64", at::kLong},
      {"I32", at::kInt},   {"I16", at::kShort},     {"I8", at::kChar},  {"U8", at::kByte},    {"BOOL", at::kBool}};
  return t;
}

// Product of the dimensions; -1 when a dimension is negative or it overflows.
int64_t checked_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

std::optional<at::ScalarType> safetensors_dtype(const std::string& name) {
  for (const auto& [n, t] : dtype_table())
    if (name == n) return t;
  return std::nullopt;
}

std::string safetensors_dtype_name(at::ScalarType t) {
  for (const auto& [n, d] : dtype_table())
    if (d == t) return n;
  throw std::invalid_argument(std::string("safetensors: no dtype name for ") + c10::toString(t));
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const std::string where = "safetensors file " + path;
  const std::string fix = "; re-export or re-download it";
  // O_NONBLOCK: a FIFO in place of the file must not block the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(where + " cannot be opened (" + std::strerror(errno) + "); check the path");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(where + " is not a regular file; point at the .safetensors file itself");
  }
  const auto file_size = static_cast<int64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    throw InputError(where + ": " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length" + fix);
  }
  map_size_ = static_cast<size_t>(file_size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw InputError(where + " cannot be mapped (" + std::strerror(errno) + ")");
  }
  try {
    SafetensorsHeader header = parse_safetensors_header(static_cast<const unsigned char*>(map_), map_size_, where);
    data_start_ = header.data_start;
    metadata_ = std::move(header.metadata);
    for (auto& [name, e] : header.entries) {
      const auto dtype = safetensors_dtype(e.dtype);
      if (!dtype) throw std::logic_error("safetensors: dtype " + e.dtype + " has a size but no ATen type");
      entries_.emplace(name, Entry{*dtype, std::move(e.shape), e.begin, e.end});
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const SafetensorsFile::Entry* SafetensorsFile::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const Entry* e = find(name);
  if (!e) throw std::out_of_range("safetensors: no tensor '" + name + "' in " + path_);
  char* p = static_cast<char*>(map_) + data_start_ + e->begin;
  const auto opts = at::TensorOptions().dtype(e->dtype);
  const at::Tensor view = at::from_blob(p, e->shape, opts);
  // The format does not align tensors; ATen's kernels expect natural alignment.
  if (reinterpret_cast<uintptr_t>(p) % c10::elementSize(e->dtype) != 0) return view.clone();
  return view;
}

int64_t SafetensorsWriter::nbytes(const Spec& s) {
  return checked_numel(s.shape) * static_cast<int64_t>(c10::elementSize(s.dtype));
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, const std::vector<Spec>& specs,
                                     const nlohmann::json& metadata)
    : path_(path), specs_(specs), out_(path, std::ios::binary) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& s : specs_) {
    const int64_t n = nbytes(s);
    header[s.name] = {
        {"dtype", safetensors_dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as Hugging Face pads it
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out_) throw std::runtime_error("safetensors: cannot write " + path_);
}

void SafetensorsWriter::add(const at::Tensor& t) {
  if (next_ >= specs_.size()) throw std::logic_error("safetensors: more tensors than specs for " + path_);
  const Spec& s = specs_[next_++];
  if (t.scalar_type() != s.dtype || t.sizes().vec() != s.shape)
    throw std::logic_error("safetensors: tensor '" + s.name + "' does not match its spec in " + path_);
  const at::Tensor c = t.contiguous().cpu();
  out_.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  if (!out_) throw std::runtime_error("safetensors: writing '" + s.name + "' to " + path_ + " failed");
}

void SafetensorsWriter::finish() {
  if (next_ != specs_.size()) throw std::logic_error("safetensors: " + path_ + " is missing tensors");
  out_.close();
  if (!out_) throw std::runtime_error("safetensors: closing " + path_ + " failed");
  const int fd = ::open(path_.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace ctitan
