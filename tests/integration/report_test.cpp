// `ctitan report` on a real sweep (tiny model, stacked rows at world sizes 1
// and 2), and the HTML report rendered by headless Chromium.
//
// Is the screenshot "not blank"? The PNG is decoded here (zlib is loaded
// with dlopen, so the test needs no extra link dependency; the PNG filters
// are undone by hand) and its pixels counted: a page of tables and charts
// has hundreds of distinct colours (anti-aliased text, the palette) and a
// few percent non-white pixels; a blank page has one colour. Comparing
// file sizes would be weaker: a blank 1200x2000 screenshot is already
// ~11 KB and a page with one heading only ~13 KB. The same check is run on
// a blank page to show it discriminates.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "tests/integration/process.h"

namespace fs = std::filesystem;
using ctitan::testing::expect_one_line_exit2;
using ctitan::testing::fresh_dir;
using ctitan::testing::run_ctitan;
using ctitan::testing::source_dir;

namespace {

struct PixelCensus {
  int width = 0, height = 0;
  size_t distinct_colors = 0;
  double non_white_fraction = 0;
};

uint32_t be32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
}

// Minimal PNG reader for Chromium's screenshots: 8-bit RGB or RGBA, not
// interlaced. Fails the test (and returns an empty census) otherwise.
PixelCensus census(const fs::path& png) {
  PixelCensus c;
  std::ifstream in(png, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 33 || bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) {
    ADD_FAILURE() << png << " is not a PNG";
    return c;
  }
  std::string idat;
  int depth = 0, color_type = 0, interlace = 0;
  for (size_t at = 8; at + 12 <= bytes.size();) {
    const uint32_t len = be32(b + at);
    const std::string type = bytes.substr(at + 4, 4);
    const unsigned char* data = b + at + 8;
    if (type == "IHDR") {
      c.width = static_cast<int>(be32(data));
      c.height = static_cast<int>(be32(data + 4));
      depth = data[8], color_type = data[9], interlace = data[12];
    } else if (type == "IDAT") {
      idat.append(reinterpret_cast<const char*>(data), len);
    }
    at += 12 + len;
  }
  if (depth != 8 || (color_type != 2 && color_type != 6) || interlace != 0) {
    ADD_FAILURE() << "unexpected PNG format: depth " << depth << ", colour type " << color_type;
    return c;
  }
  using Uncompress = int (*)(unsigned char*, unsigned long*, const unsigned char*, unsigned long);
  void* zlib = dlopen("libz.so.1", RTLD_NOW);
  if (!zlib) {
    ADD_FAILURE() << "libz.so.1 not found: " << dlerror();
    return c;
  }
  const auto uncompress = reinterpret_cast<Uncompress>(dlsym(zlib, "uncompress"));
  const size_t bpp = color_type == 6 ? 4 : 3, stride = bpp * static_cast<size_t>(c.width);
  std::vector<unsigned char> raw((stride + 1) * static_cast<size_t>(c.height));
  unsigned long raw_len = raw.size();
  const int rc = uncompress(raw.data(), &raw_len, reinterpret_cast<const unsigned char*>(idat.data()), idat.size());
  dlclose(zlib);
  if (rc != 0 || raw_len != raw.size()) {
    ADD_FAILURE() << "inflate failed (" << rc << ")";
    return c;
  }
  // Undo the per-row filters (PNG spec, section 9): None, Sub, Up, Average, Paeth.
  std::vector<unsigned char> prev(stride, 0), row(stride);
  std::unordered_set<uint32_t> colors;
  size_t non_white = 0;
  for (int y = 0; y < c.height; ++y) {
    const unsigned char* src = raw.data() + static_cast<size_t>(y) * (stride + 1);
    const int filter = src[0];
    for (size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? row[i - bpp] : 0, up = prev[i], ul = i >= bpp ? prev[i - bpp] : 0;
      int pred = 0;
      if (filter == 1) pred = a;
      if (filter == 2) pred = up;
      if (filter == 3) pred = (a + up) / 2;
      if (filter == 4) {
        const int p = a + up - ul, pa = std::abs(p - a), pb = std::abs(p - up), pc = std::abs(p - ul);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? up : ul;
      }
      row[i] = static_cast<unsigned char>(src[1 + i] + pred);
    }
    for (size_t x = 0; x < stride; x += bpp) {
      const uint32_t rgb = (uint32_t(row[x]) << 16) | (uint32_t(row[x + 1]) << 8) | row[x + 2];
      colors.insert(rgb);
      non_white += rgb != 0xFFFFFF;
    }
    std::swap(prev, row);
  }
  c.distinct_colors = colors.size();
  c.non_white_fraction = static_cast<double>(non_white) / (static_cast<double>(c.width) * c.height);
  return c;
}

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    const std::string probe = std::string("command -v ") + name + " >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return name;
  }
  return "";
}

// Headless screenshot of `page` at 1200x2000; true when the PNG was written.
bool screenshot(const std::string& browser, const fs::path& page, const fs::path& png, const fs::path& profile) {
  const std::string cmd =
      "timeout 120 " + browser +
      " --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" + profile.string() +
      " --screenshot=" + png.string() + " --window-size=1200,2000 file://" + fs::absolute(page).string() + " >" +
      (png.string() + ".log") + " 2>&1";
  return std::system(cmd.c_str()) == 0 && fs::exists(png);
}

// A stacked sweep over the tiny model: FSDP, +AC (full activation checkpointing), +Float8 at 1 and 2 ranks.
fs::path stacked_sweep(const fs::path& dir) {
  const fs::path spec = dir / "stacked.toml";
  std::ofstream(spec) << "[sweep]\nname = \"stacked\"\nbase = \""
                      << (fs::absolute(source_dir()) / "recipes/llama3_debugmodel_markov.toml").string() << "\"\n"
                      << "world_sizes = [1, 2]\nrepeats = 1\ntimeout_s = 120\nwarmup_steps = 2\nmeasure_steps = 6\n"
                      << "[overrides]\nmodel.flavor = \"tiny\"\ntraining.seq_len = 32\ntraining.local_batch_size = 4\n"
                      << "metrics.log_freq = 1\nmetrics.peak_tflops = 1\n"
                      << "[[stack]]\nname = \"FSDP\"\nparallelism.data_parallel_shard_degree = -1\n"
                      << "[[stack]]\nname = \"+AC\"\nactivation_checkpoint.mode = \"full\"\n"
                      << "[[stack]]\nname = \"+Float8\"\nmodel.converters = [\"quantize.linear.float8\"]\n";
  const fs::path db = dir / "r.db";
  setenv("OMP_NUM_THREADS", "1", 1);  // two ranks on two cores: no oversubscribed spinning threads
  const auto r = run_ctitan({"sweep", spec.string(), "--db", db.string()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return db;
}

TEST(Report, RealSweepToMarkdownCsvJsonAndHtmlThatChromiumRenders) {
  const fs::path dir = fresh_dir("report");
  const fs::path db = stacked_sweep(dir);

  const auto md = run_ctitan({"report", "--db", db.string(), "--sweep", "stacked"});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("| # | point | ws |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("Stacked optimizations \u2014 world size 2"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| 3 | +Float8 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("Scaling"), std::string::npos);
  EXPECT_NE(md.out.find("| 1 | FSDP | 1 |"), std::string::npos);  // named by what varies: the stack row
  // The sweep stored the planner's predictions: beside the measured numbers, with their error.
  EXPECT_NE(md.out.find("| n | pred. tps | err | TFLOPs |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("predicted (cpu, "), std::string::npos) << md.out;

  for (const char* ext : {"csv", "json"}) {
    const fs::path out = dir / (std::string("report.") + ext);
    const auto r = run_ctitan({"report", "--db", db.string(), "--out", out.string()});  // format from the extension
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("6 points"), std::string::npos) << r.out;
  }
  const nlohmann::json j = ctitan::testing::read_json(dir / "report.json");
  ASSERT_EQ(j["sections"][0]["points"].size(), 6u);
  for (const auto& p : j["sections"][0]["points"]) {
    EXPECT_EQ(p["status"], "ok") << p.dump();
    EXPECT_GT(p["tps"]["median"].get<double>(), 0);
    EXPECT_GT(p["predicted"]["tps"].get<double>(), 0) << p.dump();
    EXPECT_TRUE(p["predicted"]["tps_error"].is_number()) << p.dump();
  }

  const fs::path html = dir / "report.html";
  ASSERT_EQ(run_ctitan({"report", "--db", db.string(), "--format", "html", "--out", html.string()}).exit_code, 0);

  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/bootstrap.sh installs Debian's chromium)";
  const fs::path blank = dir / "blank.html";
  std::ofstream(blank) << "<!DOCTYPE html><html><body></body></html>";
  ASSERT_TRUE(screenshot(browser, html, dir / "report.png", dir / "profile"));
  ASSERT_TRUE(screenshot(browser, blank, dir / "blank.png", dir / "profile"));

  const PixelCensus page = census(dir / "report.png");
  EXPECT_EQ(page.width, 1200);
  EXPECT_EQ(page.height, 2000);
  EXPECT_GT(page.distinct_colors, 64u);
  EXPECT_GT(page.non_white_fraction, 0.02);
  const PixelCensus empty = census(dir / "blank.png");
  EXPECT_LE(empty.distinct_colors, 2u);
  EXPECT_LT(empty.non_white_fraction, 0.001);
}

// What a person on a 1366x768 laptop does with the shipped debug sweep's
// report, done by script in the real browser after the page loaded: is
// anything wider than the screen, is any chart label cut (its text must be
// "#row NAME" with NAME the points table's, inside its chart), do the sort
// and the filter work. The answers go into the DOM as JSON for the test.
constexpr const char* kProbe = R"JS(
<script>
(function () {
  var out = {};
  var vw = document.documentElement.clientWidth;
  out.viewport = vw;
  out.page_width = document.documentElement.scrollWidth;
  var summary = [];
  var start = document.getElementById('s1-summary'), stop = document.getElementById('s1-effects');
  for (var e = start; e && e !== stop; e = e.nextElementSibling)
    if (e.getBoundingClientRect().right > vw + 0.5) summary.push(e.tagName + ' ' + e.getBoundingClientRect().right);
  out.summary_overflow = summary;
  var table = document.getElementById('s1-table');
  var names = {};
  Array.prototype.forEach.call(table.tBodies[0].rows, function (r) { names[r.cells[0].textContent] = r.cells[1].textContent; });
  var bad = [], checked = 0;
  document.querySelectorAll('svg text.label, svg text.legend').forEach(function (t) {
    var svg = t.ownerSVGElement, box = t.getBBox(), vb = svg.viewBox.baseVal, text = t.textContent;
    if (box.x < -0.5 || box.x + box.width > vb.width + 0.5) bad.push('outside its chart: ' + text);
    if (text.indexOf('\u2026') >= 0) bad.push('ellipsis: ' + text);
    text.split(', ').forEach(function (part) {
      var m = part.match(/^#(\d+) (.*)$/);
      if (!m) return;
      checked++;
      if (names[m[1]] !== m[2]) bad.push('#' + m[1] + ' drawn as "' + m[2] + '", the table says "' + names[m[1]] + '"');
    });
  });
  out.labels_checked = checked;
  out.label_problems = bad;
  function column(title) {
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) if (heads[i].textContent === title) return i;
    return -1;
  }
  function values(col) {
    return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.cells[col].textContent; });
  }
  var tps = column('tps/device (p10\u2013p90)'), point = column('point');
  table.tHead.rows[0].cells[tps].click();
  out.tps_after_one_click = values(tps).map(function (v) { return parseFloat(v.replace(/,/g, '')); });
  out.tps_sort_state = table.tHead.rows[0].cells[tps].getAttribute('aria-sort');
  table.tHead.rows[0].cells[tps].click();
  out.tps_after_two_clicks = values(tps).map(function (v) { return parseFloat(v.replace(/,/g, '')); });
  table.tHead.rows[0].cells[point].click();
  out.names_after_click = values(point);
  var opt = table.querySelector('th.opt');
  out.optional_hidden = opt.getBoundingClientRect().width === 0;
  var box = document.querySelector('input.allcols');
  box.click();
  out.optional_shown = opt.getBoundingClientRect().width > 0;
  box.click();
  var filter = document.querySelector('input.filter');
  filter.value = 'F8 b2';
  filter.dispatchEvent(new Event('input'));
  out.visible_after_filter = Array.prototype.filter.call(table.tBodies[0].rows, function (r) { return !r.hidden; })
                               .map(function (r) { return r.cells[1].textContent; });
  out.rows = table.tBodies[0].rows.length;
  out.count_text = document.getElementById('s1-table-count').textContent;
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
)JS";

// Shows the page from `anchor` down (everything before it removed), for a
// screenshot of one part at the laptop's size.
std::string from_anchor(const std::string& anchor) {
  return "<script>(function(){var t=document.getElementById('" + anchor +
         "');var keep=new Set();for(var e=t;e;e=e.parentElement)keep.add(e);"
         "document.querySelectorAll('body *').forEach(function(e){if(keep.has(e)||e.contains(t))return;"
         "if(e.compareDocumentPosition(t)&Node.DOCUMENT_POSITION_FOLLOWING)e.remove();});})();</script>";
}

std::string with_script(const std::string& html, const std::string& script) {
  std::string page = html;
  page.insert(page.rfind("</body>"), script);
  return page;
}

// `chromium --dump-dom` of `page` at 1366x768 after its scripts ran.
std::string dump_dom(const std::string& browser, const fs::path& page, const fs::path& profile) {
  const fs::path out = page.string() + ".dom";
  const std::string cmd = "timeout 120 " + browser +
                          " --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                          profile.string() + " --window-size=1366,768 --virtual-time-budget=5000 --dump-dom file://" +
                          fs::absolute(page).string() + " >" + out.string() + " 2>" + out.string() + ".log";
  if (std::system(cmd.c_str()) != 0) return "";
  std::ifstream in(out);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The shipped debug sweep (recipes/sweeps/debug.toml, 72 points, ~2 minutes
// on 2 cores) reported as HTML and used in Chromium at 1366x768. The
// screenshots go to $CTITAN_SCREENSHOT_DIR when set (docs/img holds the
// ones docs/reports.md and the README show), else into the test's folder.
TEST(ReportBrowser, ShippedDebugSweepReadsOnALaptopScreen) {
  const std::string browser = chromium();
  if (browser.empty()) GTEST_SKIP() << "no chromium on PATH (scripts/bootstrap.sh installs Debian's chromium)";
  const fs::path dir = fresh_dir("report_browser");
  const fs::path db = dir / "debug.db";
  setenv("OMP_NUM_THREADS", "1", 1);
  const auto sweep = run_ctitan(
      {"sweep", (fs::absolute(source_dir()) / "recipes/sweeps/debug.toml").string(), "--db", db.string()});
  ASSERT_EQ(sweep.exit_code, 0) << sweep.err;
  const fs::path html = dir / "debug_report.html";
  ASSERT_EQ(run_ctitan({"report", "--db", db.string(), "--out", html.string()}).exit_code, 0);
  std::ifstream in(html);
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  std::ofstream(dir / "probe.html") << with_script(page, kProbe);
  const std::string dom = dump_dom(browser, dir / "probe.html", dir / "profile");
  const size_t at = dom.find("<pre id=\"probe\">");
  ASSERT_NE(at, std::string::npos) << "the probe did not finish; DOM:\n" << dom.substr(0, 2000);
  std::string text = dom.substr(at + 16, dom.find("</pre>", at) - at - 16);
  for (const auto& [entity, ch] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&lt;", "<"}, {"&gt;", ">"},
                                   {"&amp;", "&"}})
    for (size_t k; (k = text.find(entity)) != std::string::npos;) text.replace(k, entity.size(), ch);
  const nlohmann::json r = nlohmann::json::parse(text);

  EXPECT_EQ(r["viewport"], 1366);
  EXPECT_LE(r["page_width"].get<int>(), 1366) << "the page scrolls sideways";
  EXPECT_TRUE(r["summary_overflow"].empty()) << r["summary_overflow"];
  EXPECT_GE(r["labels_checked"].get<int>(), 56 * 2) << "the bar charts name every point (throughput and memory)";
  EXPECT_TRUE(r["label_problems"].empty()) << r["label_problems"];
  const auto tps1 = r["tps_after_one_click"].get<std::vector<double>>();
  EXPECT_EQ(tps1.size(), 56u);
  EXPECT_TRUE(std::is_sorted(tps1.rbegin(), tps1.rend())) << r["tps_after_one_click"];  // numbers: largest first
  EXPECT_EQ(r["tps_sort_state"], "descending");
  const auto tps2 = r["tps_after_two_clicks"].get<std::vector<double>>();
  EXPECT_TRUE(std::is_sorted(tps2.begin(), tps2.end())) << r["tps_after_two_clicks"];
  const auto names = r["names_after_click"].get<std::vector<std::string>>();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << r["names_after_click"];  // text: A to Z
  EXPECT_TRUE(r["optional_hidden"].get<bool>());
  EXPECT_TRUE(r["optional_shown"].get<bool>());
  // "F8 b2": every word, any case. The names the table has, filtered here independently.
  size_t want = 0;
  for (const std::string& n : names) {
    std::istringstream words(n);
    bool f8 = false, b2 = false;
    for (std::string w; words >> w;) f8 |= w == "f8", b2 |= w == "b2";
    want += f8 && b2;
  }
  const auto shown = r["visible_after_filter"].get<std::vector<std::string>>();
  EXPECT_EQ(shown.size(), want);
  EXPECT_GT(want, 0u);
  for (const std::string& n : shown) EXPECT_TRUE(n.find("f8") != std::string::npos && n.find("b2") != std::string::npos) << n;
  EXPECT_EQ(r["count_text"], std::to_string(want) + " of 56 points");

  // Screenshots at the laptop's size: the report's top (the summary), what each setting buys, the points table.
  const char* env = std::getenv("CTITAN_SCREENSHOT_DIR");
  const fs::path shots = env && *env ? fs::path(env) : dir / "screenshots";
  fs::create_directories(shots);
  const std::pair<const char*, const char*> parts[] = {
      {"report_summary.png", ""}, {"report_effects.png", "s1-effects"}, {"report_points.png", "s1-points"}};
  for (const auto& [name, anchor] : parts) {
    const fs::path view = dir / (std::string(name) + ".html");
    std::ofstream(view) << (*anchor ? with_script(page, from_anchor(anchor)) : page);
    const std::string cmd = "timeout 120 " + browser +
                            " --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir=" +
                            (dir / "profile").string() + " --window-size=1366,768 --virtual-time-budget=3000" +
                            " --screenshot=" + (shots / name).string() + " file://" + fs::absolute(view).string() +
                            " >" + (dir / name).string() + ".log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << name;
    const PixelCensus c = census(shots / name);
    EXPECT_EQ(c.width, 1366) << name;
    EXPECT_EQ(c.height, 768) << name;
    EXPECT_GT(c.distinct_colors, 64u) << name;
  }
}

TEST(Report, BadInputIsOneLineAndExitTwo) {
  const fs::path dir = fresh_dir("report_bad");
  expect_one_line_exit2(run_ctitan({"report", "--db", (dir / "missing.db").string()}), "does not exist");
  EXPECT_FALSE(fs::exists(dir / "missing.db"));
  expect_one_line_exit2(run_ctitan({"report"}), "needs --db");
  expect_one_line_exit2(run_ctitan({"report", "--db", (dir / "x.db").string(), "--format", "pdf"}), "pdf");
  expect_one_line_exit2(run_ctitan({"report", "--bogus"}), "report: unknown argument '--bogus'; run `ctitan report --help`");
  expect_one_line_exit2(run_ctitan({"report", "--db", (dir / "x.db").string(), "--memory-budget", "lots"}),
                        "--memory-budget 'lots' is not a memory size");
  std::ofstream(dir / "notes.txt") << "not a database";
  expect_one_line_exit2(run_ctitan({"report", "--db", (dir / "notes.txt").string()}), "notes.txt");
}

}  // namespace
