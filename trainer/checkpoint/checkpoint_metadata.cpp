#include "trainer/checkpoint/checkpoint_metadata.h"

#include <limits>

#include "common/errors.h"
#include "common/printable.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ctitan {

namespace {

const char* kFix = "; delete this step folder or set checkpoint.load_step to another step";

// One JSON document of the checkpoint; every error names `where` and `file`.
class Reader {
 public:
  Reader(std::string where, std::string file, std::string fix)
      : where_(std::move(where)), file_(std::move(file)), fix_(std::move(fix)) {}

  [[noreturn]] void fail(const std::string& entry, const std::string& what) const {
    throw InputError(where_ + ": " + file_ + (entry.empty() ? "" : " " + entry) + " " + what + fix_);
  }

  // The document, nesting bounded (nlohmann parses iteratively, but dump()
  // and the loaders recurse).
  json parse(std::string_view text) const {
    struct TooDeep {};
    try {
      return json::parse(text.begin(), text.end(), [](int depth, json::parse_event_t, json&) {
        if (depth > kMaxCheckpointJsonDepth) throw TooDeep{};
        return true;
      });
    } catch (const TooDeep&) {
      throw InputError(where_ + ": " + file_ + " nests deeper than " + std::to_string(kMaxCheckpointJsonDepth) +
                       " levels; it is not a ctitan checkpoint file" + fix_);
    } catch (const json::exception& e) {
      throw InputError(where_ + ": " + file_ + " is not valid JSON (" + message_text(e.what(), 200) + ")" + fix_);
    }
  }

  int64_t integer(const json& v, const std::string& entry, int64_t lo, int64_t hi) const {
    int64_t out = 0;
    bool ok = false;
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      ok = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      out = ok ? static_cast<int64_t>(u) : 0;
    } else if (v.is_number_integer()) {
      out = v.get<int64_t>();
      ok = true;
    }
    if (!ok || out < lo || out > hi)
      fail(entry, "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                      message_text(v.dump(), 40));
    return out;
  }

  std::string text(const json& v, const std::string& entry) const {
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) fail(entry, "must be a non-empty string");
    return v.get<std::string>();
  }

  std::vector<int64_t> dims(const json& v, const std::string& entry) const {
    if (!v.is_array() || v.size() > static_cast<size_t>(kMaxTensorDims))
      fail(entry, "must be an array of at most " + std::to_string(kMaxTensorDims) + " integers");
    std::vector<int64_t> out;
    for (size_t d = 0; d < v.size(); ++d)
      out.push_back(integer(v[d], entry + "[" + std::to_string(d) + "]", 0, kMaxTensorElements));
    return out;
  }

  const json& member(const json& object, const char* key, const std::string& entry) const {
    const auto it = object.find(key);
    if (it == object.end()) fail(entry, std::string("has no \"") + key + "\"");
    return *it;
  }

 private:
  std::string where_, file_, fix_;
};

SavedPieceEntry read_piece(const Reader& r, const json& t, const std::string& entry) {
  if (!t.is_object()) r.fail(entry, "must be an object");
  SavedPieceEntry p;
  p.name = r.text(r.member(t, "name", entry), entry + ".name");
  const std::string at = entry + " ('" + message_text(p.name) + "')";
  p.dtype = r.text(r.member(t, "dtype", at), at + ".dtype");
  p.shape = r.dims(r.member(t, "shape", at), at + ".shape");
  p.global_shape = t.contains("global_shape") ? r.dims(t.at("global_shape"), at + ".global_shape") : p.shape;
  if (p.global_shape.size() != p.shape.size())
    r.fail(at, "has a shape of " + std::to_string(p.shape.size()) + " dimensions in a global shape of " +
                   std::to_string(p.global_shape.size()));
  if (t.contains("offsets")) {  // v3: a box
    p.offsets = r.dims(t.at("offsets"), at + ".offsets");
    if (p.offsets.size() != p.global_shape.size())
      r.fail(at, "has " + std::to_string(p.offsets.size()) + " offsets for a " + std::to_string(p.global_shape.size()) +
                     "-d tensor");
  } else {  // v2: a dim-0 row range (v1: whole tensors, row 0)
    p.offsets.assign(p.global_shape.size(), 0);
    const int64_t row =
        t.contains("row_offset") ? r.integer(t.at("row_offset"), at + ".row_offset", 0, kMaxTensorElements) : 0;
    if (!p.offsets.empty()) p.offsets[0] = row;
  }
  int64_t numel = 1;
  for (size_t d = 0; d < p.global_shape.size(); ++d) {
    if (p.shape[d] > p.global_shape[d] - p.offsets[d])
      r.fail(at, "has a box past its global shape in dimension " + std::to_string(d) + " (offset " +
                     std::to_string(p.offsets[d]) + " + " + std::to_string(p.shape[d]) + " > " +
                     std::to_string(p.global_shape[d]) + ")");
    if (p.global_shape[d] > 0 && numel > kMaxTensorElements / p.global_shape[d])
      r.fail(at + ".global_shape", "has more than 2^56 elements");
    numel *= p.global_shape[d];
  }
  p.file = r.text(r.member(t, "file", at), at + ".file");
  p.offset = r.integer(r.member(t, "offset", at), at + ".offset", 0, std::numeric_limits<int64_t>::max());
  p.nbytes = r.integer(r.member(t, "nbytes", at), at + ".nbytes", 0, std::numeric_limits<int64_t>::max() - p.offset);
  p.crc32 = static_cast<uint32_t>(r.integer(r.member(t, "crc32", at), at + ".crc32", 0, 0xffffffffLL));
  return p;
}

}  // namespace

CheckpointMetadata parse_checkpoint_metadata(std::string_view text, const std::string& where) {
  const Reader r(where, "metadata.json", kFix);
  const json meta = r.parse(text);
  if (!meta.is_object()) r.fail("", "is not a JSON object");
  CheckpointMetadata m;
  m.format = meta.contains("format") && meta.at("format").is_string() ? meta.at("format").get<std::string>() : "";
  if (m.format != "ctitan-checkpoint-v3" && m.format != "ctitan-checkpoint-v2" && m.format != "ctitan-checkpoint-v1")
    throw InputError(where + ": unknown format '" + message_text(m.format) +
                     "', expected ctitan-checkpoint-v3 (or v2/v1)" + kFix);
  // 2^53: a step count a double still holds exactly (reports, TensorBoard).
  if (meta.contains("step")) m.step = r.integer(meta.at("step"), "step", 0, int64_t{1} << 53);
  if (meta.contains("model_only")) {
    if (!meta.at("model_only").is_boolean()) r.fail("model_only", "must be true or false");
    m.model_only = meta.at("model_only").get<bool>();
  }
  if (meta.contains("world_size"))
    m.world_size = static_cast<int>(r.integer(meta.at("world_size"), "world_size", 1, kMaxCheckpointWorld));
  if (meta.contains("train_state")) {
    m.train_state = meta.at("train_state");
    if (!m.train_state.is_object()) r.fail("train_state", "must be an object");
  }
  if (const auto dl = m.train_state.find("data_loader"); dl != m.train_state.end() && !dl->is_object())
    r.fail("train_state.data_loader", "must be an object (the data loader's position)");
  if (meta.contains("model")) {
    m.model = meta.at("model");
    if (!m.model.is_object()) r.fail("model", "must be an object (the model's description)");
  }
  const json& tensors = r.member(meta, "tensors", "(the index)");
  if (!tensors.is_array()) r.fail("tensors", "must be an array");
  std::map<std::string, size_t> first_of;  // name -> its first piece
  for (size_t i = 0; i < tensors.size(); ++i) {
    SavedPieceEntry p = read_piece(r, tensors[i], "tensors[" + std::to_string(i) + "]");
    const auto [it, added] = first_of.emplace(p.name, m.tensors.size());
    if (!added) {
      const SavedPieceEntry& first = m.tensors[it->second];
      if (first.global_shape != p.global_shape || first.dtype != p.dtype)
        r.fail("tensors[" + std::to_string(i) + "]",
               "is a piece of '" + message_text(p.name) + "' with another global shape or dtype than its first piece");
    }
    m.tensors.push_back(std::move(p));
  }
  return m;
}

nlohmann::json parse_rank_state(std::string_view text, const std::string& where) {
  const Reader r(where, "rank file", kFix);
  const json j = r.parse(text);
  if (!j.is_object()) r.fail("", "is not a JSON object");
  const auto it = j.find("rank_state");
  if (it == j.end() || it->is_null()) return json::object();  // null: a save given no rank state
  if (!it->is_object()) r.fail("rank_state", "must be an object");
  if (const auto dl = it->find("data_loader"); dl != it->end() && !dl->is_object())
    r.fail("rank_state.data_loader", "must be an object");
  return *it;
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view text, const std::string& where) {
  const Reader r(where, "model.safetensors.index.json",
                 "; it needs {\"weight_map\": {tensor: file}}: re-download the checkpoint");
  const json j = r.parse(text);
  if (!j.is_object()) r.fail("", "is not a JSON object");
  const json& map = r.member(j, "weight_map", "(the index)");
  if (!map.is_object()) r.fail("weight_map", "must be an object");
  std::map<std::string, std::string> out;
  for (const auto& [name, file] : map.items()) out[name] = r.text(file, "weight_map[\"" + message_text(name) + "\"]");
  return out;
}

fs::path confined_file(const fs::path& dir, const std::string& name, const std::string& where,
                       const std::string& entry) {
  const auto refuse = [&](const std::string& why) {
    throw InputError(where + ": " + entry + " names '" + message_text(name) + "', " + why +
                     "; a checkpoint may name only files inside its own folder: delete or re-download it");
  };
  if (name.empty() || name.find('\0') != std::string::npos) refuse("which is not a file name");
  const fs::path rel(name);
  if (rel.has_root_path()) refuse("an absolute path");
  for (const fs::path& part : rel)
    if (part == "..") refuse("a path out of the checkpoint folder");
  const fs::path full = dir / rel;
  // Symbolic links: compare where both resolve. A part that does not exist
  // yet resolves lexically (the loader then reports the file missing).
  std::error_code ec;
  const fs::path real_dir = fs::weakly_canonical(dir, ec);
  if (ec) return full;
  const fs::path real = fs::weakly_canonical(full, ec);
  if (ec) return full;
  const fs::path inside = real.lexically_relative(real_dir);
  if (inside.empty() || *inside.begin() == "..") refuse("a symbolic link out of the checkpoint folder");
  if (inside == ".") refuse("the folder itself");
  return full;
}

}  // namespace ctitan
