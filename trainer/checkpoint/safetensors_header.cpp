#include "trainer/checkpoint/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "common/errors.h"
#include "common/printable.h"
#include "trainer/checkpoint/checkpoint_metadata.h"

using nlohmann::json;

namespace ctitan {
namespace {

const char* kFix = "; re-export or re-download it";

// An integer >= 0 of a JSON number, or nullopt (a float, a negative or
// out-of-range number, anything else).
std::optional<int64_t> count(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return static_cast<int64_t>(u);
  } else if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    return v.get<int64_t>();
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> safetensors_element_size(const std::string& dtype) {
  static const std::pair<const char*, int64_t> kSizes[] = {{"F64", 8}, {"F32", 4}, {"BF16", 2}, {"F16", 2},
                                                           {"I64", 8}, {"I32", 4}, {"I16", 2},  {"I8", 1},
                                                           {"U8", 1},  {"BOOL", 1}};
  for (const auto& [name, size] : kSizes)
    if (dtype == name) return size;
  return std::nullopt;
}

SafetensorsHeader parse_safetensors_header(const unsigned char* file, size_t size, const std::string& where) {
  const auto file_size = static_cast<int64_t>(size);
  if (file_size < 8)
    throw InputError(where + ": " + std::to_string(file_size) + " bytes, shorter than the 8-byte header length" + kFix);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[i];
  if (header_len > static_cast<uint64_t>(file_size - 8))
    throw InputError(where + ": header length " + std::to_string(header_len) + " runs past the end of the file (" +
                     std::to_string(file_size) + " bytes)" + kFix);
  SafetensorsHeader h;
  h.data_start = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = file_size - h.data_start;
  json header;
  struct TooDeep {};
  try {
    header = json::parse(file + 8, file + h.data_start, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxSafetensorsDepth) throw TooDeep{};
      return true;
    });
  } catch (const TooDeep&) {
    throw InputError(where + ": the header nests deeper than " + std::to_string(kMaxSafetensorsDepth) + " levels" +
                     kFix);
  } catch (const json::exception& e) {
    throw InputError(where + ": the header is not JSON (" + message_text(e.what(), 200) + ")" + kFix);
  }
  if (!header.is_object()) throw InputError(where + ": the header is not a JSON object" + kFix);
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) throw InputError(where + ": __metadata__ is not a JSON object" + kFix);
      h.metadata = e;
      continue;
    }
    const std::string tensor = where + ", tensor '" + message_text(name) + "': ";
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw InputError(tensor + "needs dtype, shape and data_offsets" + kFix);
    const json& dtype = e.at("dtype");
    const auto elem = dtype.is_string() ? safetensors_element_size(dtype.get<std::string>()) : std::nullopt;
    if (!elem)
      throw InputError(tensor + "unknown dtype " +
                       (dtype.is_string() ? "'" + message_text(dtype.get<std::string>(), 40) + "'"
                                          : message_text(dtype.dump(), 40)) +
                       kFix);
    SafetensorsHeader::Entry entry{dtype.get<std::string>(), {}, 0, 0};
    const json& shape = e.at("shape");
    if (!shape.is_array()) throw InputError(tensor + "shape must be an array of integers >= 0" + kFix);
    for (const json& d : shape) {
      const auto n = count(d);
      if (!n) throw InputError(tensor + "shape must be an array of integers >= 0" + kFix);
      entry.shape.push_back(*n);
    }
    int64_t numel = std::count(entry.shape.begin(), entry.shape.end(), 0) ? 0 : 1;
    bool overflow = false;
    for (const int64_t n : entry.shape) {
      if (numel == 0 || overflow) break;
      overflow = numel > std::numeric_limits<int64_t>::max() / *elem / n;
      numel *= overflow ? 1 : n;
    }
    const json& offsets = e.at("data_offsets");
    const auto begin = offsets.is_array() && offsets.size() == 2 ? count(offsets[0]) : std::nullopt;
    const auto end = offsets.is_array() && offsets.size() == 2 ? count(offsets[1]) : std::nullopt;
    if (!begin || !end) throw InputError(tensor + "data_offsets must be [begin, end], two integers >= 0" + kFix);
    entry.begin = *begin;
    entry.end = *end;
    if (entry.end < entry.begin || entry.end > data_size)
      throw InputError(tensor + "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                       "] run past the end of the file (" + std::to_string(data_size) + " data bytes)" + kFix);
    if (overflow || entry.end - entry.begin != numel * *elem)
      throw InputError(tensor + "data_offsets hold " + std::to_string(entry.end - entry.begin) + " bytes but shape " +
                       message_text(shape.dump(), 80) + " x " + entry.dtype + " needs " +
                       (overflow ? std::string("more than 2^63") : std::to_string(numel * *elem)) + kFix);
    h.entries.emplace(name, std::move(entry));
  }
  std::vector<std::pair<int64_t, const std::string*>> by_begin;
  for (const auto& [name, e] : h.entries)
    if (e.end > e.begin) by_begin.emplace_back(e.begin, &name);
  std::sort(by_begin.begin(), by_begin.end());
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const auto& prev = h.entries.at(*by_begin[i - 1].second);
    if (by_begin[i].first < prev.end)
      throw InputError(where + ", tensor '" + message_text(*by_begin[i].second) + "': data_offsets overlap tensor '" +
                       message_text(*by_begin[i - 1].second) + "'" + kFix);
  }
  return h;
}

}  // namespace ctitan
