// Sweep spec parsing (TOML → SweepSpec). The expansion into points, the
// point key and the feasibility rules are in sweep_plan.cpp.
#include "harness/sweep_spec.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"
#include "common/file_io.h"
#include "common/limits.h"
#include "common/printable.h"
#include "planner/hardware.h"
#include "planner/model_desc.h"
#include "trainer/config/config_registry.h"

namespace fs = std::filesystem;

namespace ctitan {
namespace {

// A cluster's GPU count (TorchTitan's published tables run 512 ranks);
// whether this machine can run a world size is a feasibility rule.

// Parsing state: the spec's path for messages.
class SpecReader {
 public:
  explicit SpecReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const toml::source_region& src, const std::string& what) const {
    throw InputError("sweep spec error: " + where(src) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { throw InputError("sweep spec error: " + path_ + ": " + what); }
  std::string where(const toml::source_region& src) const { return path_ + ":" + std::to_string(src.begin.line); }

  // Leaves of `t` as dotted keys ("compile.enable"), in the order they appear
  // in the file (toml++ tables are sorted by key; the file's order is the
  // order the user meant: first grid axis slowest).
  std::vector<std::pair<std::string, const toml::node*>> leaves(const toml::table& t) const {
    std::vector<std::pair<std::string, const toml::node*>> out;
    walk(t, "", out);
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      const auto &x = a.second->source().begin, &y = b.second->source().begin;
      return x.line != y.line ? x.line < y.line : x.column < y.column;
    });
    return out;
  }

  // The config key `key` or an InputError naming the nearest one.
  const config::FieldSpec& field(const std::string& key, const toml::node& n, const std::string& table) const {
    const config::FieldSpec* f = config::find_field(key);
    if (!f)
      fail(n.source(), table + " key '" + key + "' is not a config key; did you mean '" + config::nearest_key(key) +
                           "'? (`ctitan train --help` lists every key)");
    if (key == "job.dump_folder" || key == "job.config_file" || key == "job.print_config")
      fail(n.source(), table + " key '" + key +
                           "' is set by the sweep itself (run directory, base recipe); remove it");
    return *f;
  }

  // One value of `f` in CLI spelling. List keys take an array of strings or
  // a comma-separated string; the rest take a scalar of their type.
  std::string value_text(const config::FieldSpec& f, const toml::node& n) const {
    const config::Value want = f.get(JobConfig{});
    if (want.index() == 4) {
      if (auto s = n.as_string()) return s->get();
      if (auto a = n.as_array()) {
        std::string out;
        for (const toml::node& e : *a) {
          auto s = e.as_string();
          if (!s) fail(n.source(), "'" + f.key + "' takes a list of strings; an element is not a string");
          out += (out.empty() ? "" : ",") + s->get();
        }
        return out;
      }
      fail(n.source(), "'" + f.key + "' takes a list of strings, e.g. [\"a\", \"b\"] or []");
    }
    if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
    if (auto i = n.as_integer()) return std::to_string(i->get());
    if (auto d = n.as_floating_point()) return config::render_value(config::Value(d->get()));
    if (auto s = n.as_string()) return s->get();
    fail(n.source(), "'" + f.key + "' takes a single " + config::type_name(want) + " here, got " +
                         (n.is_array() ? "an array" : "a table"));
  }

  // Alternatives for a grid axis or exclude condition: an array of values.
  // For list keys, each element is itself a list (or a comma string).
  std::vector<std::string> alternatives(const config::FieldSpec& f, const toml::node& n, bool allow_scalar) const {
    const bool list_key = f.get(JobConfig{}).index() == 4;
    const toml::array* a = n.as_array();
    const bool scalar = !a || (list_key && std::none_of(a->begin(), a->end(), [](const toml::node& e) {
                                 return e.is_array();
                               }) && allow_scalar);
    if (scalar) {
      if (!allow_scalar)
        fail(n.source(), "grid axis '" + f.key + "' needs an array of values, e.g. " + f.key + " = [" +
                             (list_key ? "[], [\"a\"]" : "1, 2") + "]");
      return {value_text(f, n)};
    }
    std::vector<std::string> out;
    for (const toml::node& e : *a) out.push_back(value_text(f, e));
    if (out.empty()) fail(n.source(), "grid axis '" + f.key + "' has no values; give at least one or remove it");
    return out;
  }

  int64_t integer(const toml::node& n, const std::string& key, int64_t lo, int64_t hi) const {
    auto i = n.as_integer();
    if (!i || i->get() < lo || i->get() > hi)
      fail(n.source(), key + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                           shown(n));
    return i->get();
  }

  // A number in [lo, hi]; every numeric spec key has a range, so no value
  // can overflow a clock or a byte count downstream.
  double number(const toml::node& n, const std::string& key, double lo, double hi) const {
    double v = std::nan("");
    if (auto i = n.as_integer()) v = static_cast<double>(i->get());
    if (auto d = n.as_floating_point()) v = d->get();
    if (!(v >= lo && v <= hi)) {
      std::ostringstream range;
      range << key << " must be a number from " << lo << " to " << hi << ", got " << shown(n);
      fail(n.source(), range.str());
    }
    return v;
  }

  std::vector<int> world_sizes(const toml::node& n) const {
    std::vector<int> out;
    if (auto a = n.as_array()) {
      for (const toml::node& e : *a)
        out.push_back(static_cast<int>(integer(e, "world_sizes entries", 1, kMaxWorldSize)));
    } else {
      out.push_back(static_cast<int>(integer(n, "world_size", 1, kMaxWorldSize)));
    }
    if (out.empty()) fail(n.source(), "world_sizes is empty; list at least one, e.g. world_sizes = [1, 2]");
    return out;
  }

  static std::string shown(const toml::node& n) {
    std::ostringstream os;
    if (n.is_array() || n.is_table()) {
      os << (n.is_array() ? "an array" : "a table");
    } else {
      n.visit([&](auto&& v) { os << v; });
    }
    return os.str();
  }

 private:
  void walk(const toml::table& t, const std::string& prefix,
            std::vector<std::pair<std::string, const toml::node*>>& out) const {
    for (auto&& [k, node] : t) {
      const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      if (auto sub = node.as_table(); sub && !config::find_field(key)) {
        if (sub->empty()) fail(node.source(), "'[" + key + "]' is empty");
        walk(*sub, key, out);
      } else {
        out.emplace_back(key, &node);
      }
    }
  }

  std::string path_;
};

const toml::table& as_table(const SpecReader& r, const toml::node& n, const std::string& what) {
  if (!n.is_table()) r.fail(n.source(), what + " must be a table");
  return *n.as_table();
}

// Rows of an array of tables ([[exclude]], [[include]], [[stack]]).
std::vector<const toml::table*> rows(const SpecReader& r, const toml::node& n, const std::string& name) {
  std::vector<const toml::table*> out;
  auto a = n.as_array();
  if (!a) r.fail(n.source(), "'" + name + "' must be an array of tables: write [[" + name + "]]");
  for (const toml::node& e : *a) out.push_back(&as_table(r, e, "each [[" + name + "]] row"));
  return out;
}

void read_sweep_table(const SpecReader& r, const toml::table& t, SweepSpec& s, std::vector<Assignment>& steps) {
  static const std::vector<std::string> kKeys = {"name",         "base",          "world_sizes",      "repeats",
                                                 "timeout_s",    "warmup_steps", "measure_steps",    "memory_budget_gb",
                                                 "hardware",     "launcher",      "plan_profile"};
  for (auto&& [k, n] : t) {
    const std::string key(k.str());
    const std::string w = r.where(n.source());
    if (key == "name") {
      auto v = n.as_string();
      if (!v) r.fail(n.source(), "name must be a string (it names the sweep and its run folder)");
      try {
        check_sweep_name(v->get());
      } catch (const InputError& e) {
        r.fail(n.source(), e.what());
      }
      s.name = v->get();
    } else if (key == "base") {
      auto v = n.as_string();
      if (!v) r.fail(n.source(), "base must be the path of a trainer TOML recipe, relative to the spec");
      s.base_path = v->get();
    } else if (key == "world_sizes") {
      s.world_sizes = r.world_sizes(n);
    } else if (key == "repeats") {
      s.repeats = static_cast<int>(r.integer(n, key, 1, 1000));
    } else if (key == "timeout_s") {
      // Up to 30 days: a run's deadline stays far inside the clock's range.
      s.timeout_s = r.number(n, key, 0.001, kMaxTimeoutS);
    } else if (key == "memory_budget_gb") {
      s.memory_budget_gb = r.number(n, key, 0, kMaxMemoryBudgetGb);
    } else if (key == "hardware") {  // the planner's spec the points are predicted on
      auto v = n.as_string();
      if (!v || v->get().empty())
        r.fail(n.source(), "hardware must be a spec name from recipes/hardware/ (h100_sxm, cpu, ...) or a .toml path");
      try {
        load_hardware(v->get());
      } catch (const InputError& e) {
        r.fail(n.source(), e.what());
      }
      s.hardware = v->get();
    } else if (key == "plan_profile") {  // profiled runs the planner measures with
      auto a = n.as_array();
      if (!a || a->empty())
        r.fail(n.source(), "plan_profile must be a list of profiled run directories (a single-process run first), "
                           "as `ctitan plan --profile` takes them");
      for (const toml::node& e : *a) {
        auto v = e.as_string();
        if (!v || v->get().empty()) r.fail(e.source(), "plan_profile entries must be run directories (strings)");
        s.plan_profile.push_back(v->get());
      }
    } else if (key == "launcher") {
      auto v = n.as_string();
      if (!v || (v->get() != "local" && v->get() != "slurm"))
        r.fail(n.source(), "launcher must be \"local\" (runs here) or \"slurm\" (one sbatch job per run)");
      s.launcher = v->get();
    } else if (key == "warmup_steps") {
      steps.push_back({"metrics.warmup_steps", std::to_string(r.integer(n, key, 0, 1000000)), w});
    } else if (key == "measure_steps") {
      steps.push_back({"training.steps", std::to_string(r.integer(n, key, 1, 1000000)), w});
    } else {
      std::string list;
      for (const auto& x : kKeys) list += (list.empty() ? "" : ", ") + x;
      r.fail(k.source(), "unknown [sweep] key '" + key + "'; [sweep] takes " + list);
    }
  }
}

std::vector<Assignment> assignments(const SpecReader& r, const toml::table& t, const std::string& table,
                                    const std::vector<std::string>& reserved = {}) {
  std::vector<Assignment> out;
  for (const auto& [key, n] : r.leaves(t)) {
    if (std::find(reserved.begin(), reserved.end(), key) != reserved.end()) continue;
    const config::FieldSpec& f = r.field(key, *n, table);
    out.push_back({key, r.value_text(f, *n), r.where(n->source())});
  }
  return out;
}

// A published row's model: the planner's shape keys (`ctitan plan
// --model.KEY`), each checked here on a scratch model so that a bad key or
// value is this file's line (the shape as a whole is checked once the row's
// keys are all applied, harness/published.cpp). n_layers is the point's own
// trainer key.
std::vector<Assignment> model_keys(const SpecReader& r, const toml::table& t, const std::string& table) {
  std::vector<Assignment> out;
  ModelDesc scratch = model_from_flavor("8B");
  for (const auto& [key, node] : r.leaves(t)) {
    if (key == "n_layers")
      r.fail(node->source(), table + ": n_layers is the point's model.n_layers (a trainer key: set it in the "
                             "spec's overrides or include rows), not a model key here");
    std::string text;
    if (auto v = node->as_integer()) text = std::to_string(v->get());
    else if (auto sv = node->as_string()) text = sv->get();
    else r.fail(node->source(), table + "." + key + " must be an integer or a string");
    try {
      override_model(scratch, key, text);
    } catch (const InputError& e) {
      r.fail(node->source(), table + ": " + e.what());
    }
    out.push_back({key, text, r.where(node->source())});
  }
  return out;
}

// [published]: the figures a publication reports for points of this sweep.
// Only read here; harness/published.cpp resolves each row to its point.
PublishedSpec read_published(const SpecReader& r, const toml::table& t) {
  PublishedSpec p;
  p.where = r.where(t.source());
  const auto text = [&](const toml::node& n, const std::string& key) {
    auto v = n.as_string();
    if (!v || v->get().empty()) r.fail(n.source(), "[published] " + key + " must be a non-empty string");
    return v->get();
  };
  const auto positive = [&](const toml::node& n, const std::string& key, double hi) {
    const double v = r.number(n, key, 0, hi);
    if (v <= 0) r.fail(n.source(), key + " must be > 0");
    return v;
  };
  for (auto&& [k, n] : t) {
    const std::string key(k.str());
    if (key == "source") {
      p.source = text(n, key);
    } else if (key == "hardware") {
      p.hardware = text(n, key);
    } else if (key == "gpus") {
      p.gpus = static_cast<int>(r.integer(n, "[published] gpus", 1, kMaxWorldSize));
    } else if (key == "framework") {
      p.framework = text(n, key);
      if (p.framework != "torchtitan" && p.framework != "ctitan" && p.framework != "megatron")
        r.fail(n.source(), "[published] framework '" + p.framework + "' is not one the planner models; say \"torchtitan\", "
                           "\"ctitan\" or \"megatron\"");
    } else if (key == "flops_formula") {
      p.flops_formula = text(n, key);
      if (p.flops_formula != "megatron")
        r.fail(n.source(), "[published] flops_formula '" + p.flops_formula + "' is not known; \"megatron\" "
                           "(Narayanan et al. 2021, Eq. 3) is the one the planner converts to tokens/s");
    } else if (key == "model") {
      p.model = model_keys(r, as_table(r, n, "[published] model"), "[published] model");
    } else if (key == "rows") {
      for (const toml::table* row : rows(r, n, "published.rows")) {
        PublishedRowSpec pr;
        pr.where = r.where(row->source());
        bool has_tps = false;
        for (auto&& [rk, rn] : *row) {
          const std::string rkey(rk.str());
          if (rkey == "label" || rkey == "stack") {
            (rkey == "label" ? pr.label : pr.stack) = text(rn, "rows " + rkey);
          } else if (rkey == "point") {
            const toml::table& pt = as_table(r, rn, "[[published.rows]] point");
            if (pt.empty()) r.fail(rn.source(), "point = {} picks nothing; name settings or remove it");
            pr.point = assignments(r, pt, "published point");
          } else if (rkey == "gpus") {
            pr.gpus = static_cast<int>(r.integer(rn, "[[published.rows]] gpus", 1, kMaxWorldSize));
          } else if (rkey == "tps") {
            pr.tps = positive(rn, "tps (tokens/s per GPU)", 1e9), has_tps = true;
          } else if (rkey == "tflops") {
            pr.tflops = positive(rn, "tflops (teraFLOP/s per GPU)", 1e6);
          } else if (rkey == "model") {
            pr.model = model_keys(r, as_table(r, rn, "[[published.rows]] model"), "[[published.rows]] model");
          } else if (rkey == "mem_gib") {
            pr.mem_gib = positive(rn, "mem_gib", kMaxMemoryBudgetGb);
          } else if (rkey == "mfu_pct") {
            pr.mfu_pct = positive(rn, "mfu_pct", 100);
          } else {
            r.fail(rk.source(), "unknown [[published.rows]] key '" + rkey +
                                    "'; a row takes label, stack, point, gpus, tps or tflops, model, mem_gib, mfu_pct");
          }
        }
        if (has_tps == pr.tflops.has_value())
          r.fail(row->source(), "a [[published.rows]] row needs tps (tokens/s per GPU) or tflops (with [published] "
                                "flops_formula), one of them");
        if (pr.tflops && !t.contains("flops_formula"))
          r.fail(row->source(), "the row gives tflops but [published] has no flops_formula saying how they were counted");
        p.rows.push_back(std::move(pr));
      }
    } else {
      r.fail(k.source(), "unknown [published] key '" + key +
                             "'; [published] takes source, hardware, gpus, framework, flops_formula, model and "
                             "[[published.rows]]");
    }
  }
  for (const char* need : {"source", "hardware"})
    if (!t.contains(need)) r.fail(t.source(), std::string("[published] needs ") + need);
  if (p.rows.empty()) r.fail(t.source(), "[published] has no [[published.rows]]");
  return p;
}

// [slurm]: the Slurm launcher's settings.
SlurmOptions read_slurm(const SpecReader& r, const toml::table& t) {
  SlurmOptions o;
  o.where = r.where(t.source());
  for (auto&& [k, n_binding] : t) {
    const toml::node& n = n_binding;  // a reference the lambdas below can capture (clang < 16)
    const std::string key(k.str());
    const auto text = [&]() {
      auto v = n.as_string();
      if (!v || v->get().empty()) r.fail(n.source(), "[slurm] " + key + " must be a non-empty string");
      return v->get();
    };
    if (key == "partition") {
      o.partition = text();
    } else if (key == "account") {
      o.account = text();
    } else if (key == "qos") {
      o.qos = text();
    } else if (key == "time") {
      o.time = text();
    } else if (key == "gpus_per_node") {
      o.gpus_per_node = static_cast<int>(r.integer(n, "[slurm] gpus_per_node", 0, 1024));
    } else if (key == "tasks_per_node") {
      o.tasks_per_node = static_cast<int>(r.integer(n, "[slurm] tasks_per_node", 1, 4096));
    } else if (key == "cpus_per_task") {
      o.cpus_per_task = static_cast<int>(r.integer(n, "[slurm] cpus_per_task", 1, 4096));
    } else if (key == "max_queued") {
      o.max_queued = static_cast<int>(r.integer(n, "[slurm] max_queued", 1, 100000));
    } else if (key == "sbatch") {
      const toml::array* a = n.as_array();
      if (!a) r.fail(n.source(), "[slurm] sbatch must be an array of strings, e.g. [\"--exclusive\", \"--mem=0\"]");
      for (const toml::node& e : *a) {
        auto v = e.as_string();
        if (!v || v->get().empty() || v->get().find_first_of("\n\r") != std::string::npos)
          r.fail(e.source(), "each [slurm] sbatch entry must be one non-empty line (an sbatch option)");
        o.sbatch_lines.push_back(v->get());
      }
    } else {
      std::string list;
      for (const auto& x : slurm_keys()) list += (list.empty() ? "" : ", ") + x;
      r.fail(k.source(), "unknown [slurm] key '" + key + "'; [slurm] takes " + list);
    }
  }
  return o;
}

}  // namespace

void check_sweep_name(const std::string& name) {
  const std::string shown = message_text(name, 60);
  const auto bad = [&](const std::string& why) {
    throw InputError("sweep name '" + shown + "' " + why +
                     "; set [sweep] name to letters, digits, '.', '_' or '-' (at most " +
                     std::to_string(kMaxSweepNameLength) + " characters, not starting with '.')");
  };
  if (name.empty()) bad("is empty");
  if (name.size() > kMaxSweepNameLength) bad("is " + std::to_string(name.size()) + " characters long");
  if (name[0] == '.') bad("starts with '.' (it names a folder inside <db>.runs)");
  for (const char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-')
      bad("has a character a folder name cannot safely hold");
}

namespace {
SweepSpec parse_spec_text(const std::string& text, const std::string& path);
}  // namespace

// Every refusal is one line: a spec's strings (a base path, a [report]
// entry) may hold a "\n", which the message shows escaped.
SweepSpec parse_sweep_spec(const std::string& text, const std::string& path) {
  try {
    return parse_spec_text(text, path);
  } catch (const InputError& e) {
    std::string line = e.what();
    for (size_t at = 0; (at = line.find_first_of("\n\r", at)) != std::string::npos; at += 2)
      line.replace(at, 1, line[at] == '\n' ? "\\n" : "\\r");
    throw InputError(line);
  }
}

namespace {

// [grid]: each axis a config key and its values.
void read_grid(const SpecReader& r, const toml::node& n, SweepSpec& s) {
  const toml::table& g = as_table(r, n, "[grid]");
  if (g.empty())
    r.fail(n.source(), "[grid] is empty; add an axis such as compile.enable = [false, true], or remove [grid]");
  for (const auto& [axis_key, v] : r.leaves(g)) {
    if (axis_key == "world_size" || axis_key == "world_sizes")
      r.fail(v->source(), "world sizes are not a grid axis; set [sweep] world_sizes = [1, 2]");
    const config::FieldSpec& f = r.field(axis_key, *v, "grid");
    s.grid.push_back({axis_key, r.where(v->source()), r.alternatives(f, *v, false)});
  }
}

// [[exclude]]: rows of conditions, each dropping the points it matches.
void read_exclude(const SpecReader& r, const toml::node& n, const std::string& key, SweepSpec& s) {
  for (const toml::table* row : rows(r, n, key)) {
    std::vector<Condition> rule;
    for (const auto& [ck, v] : r.leaves(*row)) {
      if (ck == "world_size") {
        std::vector<std::string> ws;
        for (int w : r.world_sizes(*v)) ws.push_back(std::to_string(w));
        rule.push_back({ck, r.where(v->source()), ws});
        continue;
      }
      const config::FieldSpec& f = r.field(ck, *v, "exclude");
      rule.push_back({ck, r.where(v->source()), r.alternatives(f, *v, true)});
    }
    if (rule.empty()) r.fail(n.source(), "an [[exclude]] row is empty: it would drop every point");
    s.exclude.push_back(std::move(rule));
  }
}

// [[include]]: extra points, each its own assignments (and world sizes).
void read_include(const SpecReader& r, const toml::node& n, const std::string& key, SweepSpec& s) {
  for (const toml::table* row : rows(r, n, key)) {
    IncludeRow inc;
    if (const toml::node* ws = row->get("world_size")) inc.world_sizes = r.world_sizes(*ws);
    inc.sets = assignments(r, *row, "include", {"world_size"});
    s.include.push_back(std::move(inc));
  }
}

// [[stack]]: named rows of assignments, each crossed with the grid.
void read_stack(const SpecReader& r, const toml::node& n, const std::string& key, SweepSpec& s) {
  for (const toml::table* row : rows(r, n, key)) {
    StackRow st;
    auto name = row->get_as<std::string>("name");
    if (!name || name->get().empty()) r.fail(row->source(), "each [[stack]] row needs name = \"...\"");
    st.name = name->get();
    st.sets = assignments(r, *row, "stack", {"name"});
    s.stack.push_back(std::move(st));
  }
}

// [quality]: seeds, a target loss, how often to validate, the budget.
QualitySpec read_quality(const SpecReader& r, const toml::table& t) {
  QualitySpec q;
  q.where = r.where(t.source());
  for (auto&& [k, n] : t) {
    const std::string key(k.str());
    if (key == "seeds") {
      q.seeds = static_cast<int>(r.integer(n, "[quality] seeds", 1, 1000));
    } else if (key == "target_loss") {
      q.target_loss = r.number(n, "[quality] target_loss", 1e-9, 1e6);
    } else if (key == "eval_every") {
      q.eval_every = r.integer(n, "[quality] eval_every", 1, 1000000);
    } else if (key == "steps") {
      q.steps = r.integer(n, "[quality] steps", 1, 10000000);
    } else if (key == "eval_batches") {
      q.eval_batches = r.integer(n, "[quality] eval_batches", 1, 1000000);
    } else {
      r.fail(k.source(), "unknown [quality] key '" + key +
                             "'; [quality] takes seeds, target_loss, eval_every, steps and eval_batches");
    }
  }
  if (q.eval_every == 0)
    r.fail(t.source(), "[quality] needs eval_every (validate every N steps): the loss curves and the target are "
                       "read from the validation passes");
  return q;
}

// [quality] on the spec: its seeds are the points' runs and its settings the
// last overrides (after [sweep]'s steps, before grid values).
void apply_quality(const SpecReader& r, const std::vector<Assignment>& steps, SweepSpec& s) {
  const QualitySpec& q = *s.quality;
  if (s.repeats > 1 && q.seeds > 1)
    r.fail("[sweep] repeats = " + std::to_string(s.repeats) + " and [quality] seeds = " + std::to_string(q.seeds) +
           ": with [quality] every run of a point is its own seed; give seeds only");
  if (q.steps > 0)
    for (const Assignment& a : steps)
      if (a.key == "training.steps")
        r.fail("[sweep] measure_steps and [quality] steps both set training.steps; keep [quality] steps (the "
               "budget) and [sweep] warmup_steps only");
  if (q.seeds > 1) s.repeats = q.seeds;
  s.overrides.push_back({"validation.enable", "true", q.where});
  s.overrides.push_back({"validation.freq", std::to_string(q.eval_every), q.where});
  if (q.target_loss > 0) {
    std::ostringstream v;
    v << std::setprecision(17) << q.target_loss;
    s.overrides.push_back({"validation.target_loss", v.str(), q.where});
  }
  if (q.steps > 0) s.overrides.push_back({"training.steps", std::to_string(q.steps), q.where});
  if (q.eval_batches > 0) s.overrides.push_back({"validation.steps", std::to_string(q.eval_batches), q.where});
}

// [report]: stack = the order techniques stack in.
void read_report(const SpecReader& r, const toml::node& n, SweepSpec& s) {
  for (auto&& [rk, rv] : as_table(r, n, "[report]")) {
    if (rk.str() != "stack")
      r.fail(rk.source(), "unknown [report] key '" + std::string(rk.str()) +
                              "'; [report] has stack = [\"compile.enable\", ...] (the order techniques stack in)");
    const toml::array* a = rv.as_array();
    if (!a || a->empty())
      r.fail(rv.source(), "[report] stack must be a non-empty array of grid axes, e.g. [\"compile.enable\", "
                          "\"model.converters=quantize.linear.float8\"]");
    for (const toml::node& e : *a) {
      const auto str = e.value<std::string>();
      if (!str) r.fail(e.source(), "[report] stack entries are strings: \"KEY\" or \"KEY=VALUE\"");
      s.report_stack.push_back({*str, r.where(e.source())});
    }
  }
}

// [report] stack: each entry a [grid] axis, and with two values or the one
// named; an axis stacks once (a second step on it could pair no points).
void check_report_stack(const SweepSpec& s) {
  for (size_t i = 0; i < s.report_stack.size(); ++i) {
    const auto& [entry, where] = s.report_stack[i];
    const auto eq = entry.find('=');
    const std::string key = entry.substr(0, eq);
    for (size_t j = 0; j < i; ++j)
      if (s.report_stack[j].first.substr(0, s.report_stack[j].first.find('=')) == key)
        throw InputError("sweep spec error: " + where + ": [report] stack entry '" + entry + "' repeats '" +
                         s.report_stack[j].first + "' (" + s.report_stack[j].second +
                         "); each axis stacks once: remove one of them");
    const auto axis =
        std::find_if(s.grid.begin(), s.grid.end(), [&](const SweepAxis& g) { return g.key == key; });
    if (axis == s.grid.end())
      throw InputError("sweep spec error: " + where + ": [report] stack entry '" + entry +
                       "' is not a [grid] axis; stack the axes the grid crosses");
    if (eq == std::string::npos && axis->values.size() != 2)
      throw InputError("sweep spec error: " + where + ": [report] stack entry '" + key + "' has " +
                       std::to_string(axis->values.size()) + " values in [grid]; name the one to stack: '" + key +
                       "=" + axis->values.back() + "'");
    if (eq != std::string::npos) {
      const std::string value = entry.substr(eq + 1);
      const bool known = std::find(axis->values.begin() + 1, axis->values.end(), value) != axis->values.end() ||
                         (value == "[]" && std::find(axis->values.begin() + 1, axis->values.end(), "") !=
                                               axis->values.end());
      if (!known)
        throw InputError("sweep spec error: " + where + ": [report] stack entry '" + entry + "': '" + value +
                         "' is not one of the axis's values after its first (the chain starts from the first)");
    }
  }
}

// [[published.rows]] name this spec's stack rows and world sizes.
void check_published_rows(SweepSpec& s) {
  for (const PublishedRowSpec& row : s.published->rows) {
    const bool known =
        std::any_of(s.stack.begin(), s.stack.end(), [&](const StackRow& st) { return st.name == row.stack; });
    if (!s.stack.empty() && !known) {
      std::string names;
      for (const StackRow& st : s.stack) {
        names += names.empty() ? "'" : ", '";
        names += st.name + "'";
      }
      throw InputError("sweep spec error: " + row.where + ": [[published.rows]] stack = '" + row.stack +
                       "' names no [[stack]] row; the rows are " + names);
    }
    if (s.stack.empty() && !row.stack.empty())
      throw InputError("sweep spec error: " + row.where + ": [[published.rows]] stack '" + row.stack +
                       "' but the spec has no [[stack]] rows");
  }
  for (PublishedRowSpec& row : s.published->rows) {
    if (row.gpus == 0) row.gpus = s.published->gpus;
    if (row.gpus == 0)
      throw InputError("sweep spec error: " + row.where + ": the row needs gpus, or [published] gpus for every row");
    if (std::find(s.world_sizes.begin(), s.world_sizes.end(), row.gpus) == s.world_sizes.end())
      throw InputError("sweep spec error: " + row.where + ": the row's gpus = " + std::to_string(row.gpus) +
                       " is not in [sweep] world_sizes");
  }
}

// [sweep] base and plan_profile, relative to the spec's folder.
void resolve_paths(const SpecReader& r, const std::string& path, SweepSpec& s) {
  if (s.base_path.empty()) r.fail("[sweep] base is missing: the trainer recipe every point starts from");
  const fs::path base = fs::path(s.base_path).is_absolute() ? fs::path(s.base_path)
                                                            : fs::path(path).parent_path() / s.base_path;
  s.base_path = base.lexically_normal().string();
  for (std::string& d : s.plan_profile) {
    const fs::path p = fs::path(d).is_absolute() ? fs::path(d) : fs::path(path).parent_path() / d;
    d = p.lexically_normal().string();
    if (!fs::is_directory(p))
      r.fail("[sweep] plan_profile '" + d + "' is not a run directory; record one with `ctitan train ... "
             "--profiling.enable_profiling --job.dump_folder DIR`");
  }
  if (!fs::is_regular_file(base)) r.fail("[sweep] base '" + s.base_path + "' is not a file");
}

// Refused before anything is expanded: points are planned one by one with
// the trainer's own config, so a grid's size is its cost in time and memory.
void check_point_count(const SpecReader& r, const SweepSpec& s) {
  double points = static_cast<double>(std::max<size_t>(1, s.world_sizes.size())) *
                  static_cast<double>(std::max<size_t>(1, s.stack.size()));
  std::string shape = std::to_string(std::max<size_t>(1, s.world_sizes.size())) + " world sizes";
  if (!s.stack.empty()) shape += " x " + std::to_string(s.stack.size()) + " stack rows";
  for (const SweepAxis& g : s.grid) {
    points *= static_cast<double>(g.values.size());
    shape += " x " + std::to_string(g.values.size()) + " " + g.key;
  }
  points += static_cast<double>(s.include.size());
  if (points > kMaxSweepPoints) {
    std::ostringstream line;
    line << std::fixed << std::setprecision(0) << "the spec expands to " << points << " points (" << shape
         << "), more than the " << kMaxSweepPoints << " a sweep takes; split it into several specs";
    r.fail(line.str());
  }
}

// warmup + measure = training.steps, as TorchTitan users read a benchmark.
void fold_steps(const SpecReader& r, std::vector<Assignment>& steps, SweepSpec& s) {
  int64_t warmup = -1;
  for (const Assignment& a : steps)
    if (a.key == "metrics.warmup_steps") warmup = std::stoll(a.text);
  if (warmup < 0 && !steps.empty())
    r.fail("[sweep] measure_steps needs warmup_steps too (training.steps = warmup_steps + measure_steps)");
  for (Assignment& a : steps) {
    if (a.key == "training.steps") a.text = std::to_string(std::stoll(a.text) + warmup);
    s.overrides.push_back(a);
  }
}

SweepSpec parse_spec_text(const std::string& text, const std::string& path) {
  const SpecReader r(path);
  try {
    check_toml_nesting(text, path);
  } catch (const InputError& e) {
    throw InputError("sweep spec error: " + std::string(e.what()));
  }
  toml::table root;
  try {
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::replace(what.begin(), what.end(), '\r', ' ');
    r.fail(e.source(), "invalid TOML: " + what);
  }
  SweepSpec s;
  s.path = path;
  s.text = text;
  s.name = fs::path(path).stem().string();
  std::vector<Assignment> steps;  // warmup_steps / measure_steps
  for (auto&& [k, n] : root) {
    const std::string key(k.str());
    if (key == "sweep") {
      read_sweep_table(r, as_table(r, n, "[sweep]"), s, steps);
    } else if (key == "overrides") {
      s.overrides = assignments(r, as_table(r, n, "[overrides]"), "[overrides]");
    } else if (key == "grid") {
      read_grid(r, n, s);
    } else if (key == "exclude") {
      read_exclude(r, n, key, s);
    } else if (key == "include") {
      read_include(r, n, key, s);
    } else if (key == "stack") {
      read_stack(r, n, key, s);
    } else if (key == "published") {
      s.published = read_published(r, as_table(r, n, "[published]"));
    } else if (key == "quality") {
      s.quality = read_quality(r, as_table(r, n, "[quality]"));
    } else if (key == "slurm") {
      s.slurm = read_slurm(r, as_table(r, n, "[slurm]"));
    } else if (key == "report") {
      read_report(r, n, s);
    } else {
      r.fail(k.source(), "unknown table '[" + key + "]'; a sweep spec has [sweep], [overrides], [grid], "
                         "[[exclude]], [[include]], [[stack]], [report], [quality], [slurm] and [published]");
    }
  }
  check_report_stack(s);
  if (s.published) check_published_rows(s);
  resolve_paths(r, path, s);
  std::sort(s.world_sizes.begin(), s.world_sizes.end());
  s.world_sizes.erase(std::unique(s.world_sizes.begin(), s.world_sizes.end()), s.world_sizes.end());
  try {
    check_sweep_name(s.name);  // from the file name when [sweep] name is not set
  } catch (const InputError& e) {
    r.fail(e.what());
  }
  check_point_count(r, s);
  fold_steps(r, steps, s);
  if (s.quality) apply_quality(r, steps, s);
  return s;
}

}  // namespace

SweepSpec load_sweep_spec(const std::string& path) {
  std::string text;
  try {
    text = read_file_bounded(path, "sweep spec", kMaxConfigBytes, /*allow_empty=*/false);
  } catch (const InputError& e) {
    throw InputError("sweep spec error: " + std::string(e.what()));
  }
  return parse_sweep_spec(text, path);
}

}  // namespace ctitan
