// Short names for sweep settings, defined once and used by every renderer
// (Markdown, HTML, CSV, JSON) and by the effects: a point reads
// "fsdp2 tp2 compile f8 ac=full b2" instead of its full key=value label.
//
// A setting's token is what a TorchTitan user would write in a results
// table: compile.enable=true → "compile", model.converters=[float8] → "f8",
// activation_checkpoint.mode=full → "ac=full", training.local_batch_size=2
// → "b2". The "off" value that goes without saying (compile false, no
// converter, AC none) has no token in a name, and an explicit one where a
// comparison must name both sides ("eager", "no converter", "ac=none").
// The parallel layout is one set of tokens derived from the run's resolved
// degrees ("fsdp2 tp2", "ddp2", "hsdp2x2", "pp2 1F1B", "single"), so
// data_parallel_shard_degree = -1 reads as what it became at that world size.
// A key without an alias keeps its last name part: "moe_score_func=sigmoid".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ctitan::alias {

// The key's short name ("compile", "Float8", "AC", "batch", "tp"); the full
// key's last part where it has no alias.
std::string key_name(const std::string& key);

// The token `key=value` adds to a point's name; "" for the off value.
std::string token(const std::string& key, const std::string& value);

// The value named on its own, never "": the token, or for the off value
// its explicit name ("eager", "no converter", "ac=none", "moe_top_k=0").
std::string value_name(const std::string& key, const std::string& value);

// Keys the layout name stands for (the data-parallel, tensor, pipeline,
// context and expert degrees, async TP and the pipeline schedule).
bool is_layout_key(const std::string& key);

// The layout of a run from its stored config (TOML) and world size:
// "single", "fsdp2", "ddp2", "hsdp2x2", "fsdp2 tp2", "tp2 pp2 GPipe", "cp2"
// (with "async" before tp when enabled). "" when the config cannot be read.
std::string layout(const std::string& config_toml, int64_t world_size);

// The layout from key=value settings alone (no stored config): each layout
// key's token, in order ("tp2 pp2 GPipe").
std::string layout_from_settings(const std::vector<std::pair<std::string, std::string>>& settings);

}  // namespace ctitan::alias
