#include "verify/plugin_verify.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "attn/io/npy.hpp"
#include "attn/registry/plugin.hpp"
#include "attn/io/json.hpp"
#include "attn/verify/invariance.hpp"
#include "attn/verify/properties.hpp"
#include "studies/studies.hpp"  // median

extern char** environ;

namespace attn::plugin_verify {
namespace fs = std::filesystem;
using props::Case;
using props::MaskKind;
using props::Property;

namespace {

// RapidCheck's seed of every cell (printed in the verdict): a verdict is
// reproducible run to run.
constexpr std::uint64_t kSeed = 20261201;
// A child that shows no progress (a case or a cell finished) for this long
// is stopped and the cell counted as a hang of the plugin.
constexpr double kStallSeconds = 600;

int cases_of(const std::string& profile) {
  if (profile == "smoke") return 10;
  if (profile == "quick") return 30;
  if (profile == "full") return 100;
  throw Error("--profile '" + profile + "' is not one of smoke, quick, full");
}

struct Config {
  const PrecisionInfo* precision;
  Accumulate acc;
  std::string name() const { return std::string(precision->name) + "/" + std::string(accumulate_name(acc)); }
};

// Every (storage, accumulation) the kernel claims, on a plain problem
// (fp64 storage with storage accumulation is fp64 accumulation: once).
std::vector<Config> configs_of(const BackendInfo& b) {
  std::vector<Config> out;
  for (const PrecisionInfo& p : precisions())
    for (Accumulate a : accumulate_policies()) {
      if (p.default_accumulate == Accumulate::fp64 && a == Accumulate::storage) continue;
      if (b.unsupported_reason(p, a, Shape{}, Options{}).empty()) out.push_back({&p, a});
    }
  return out;
}

// A cell: a property of the suite in one configuration, or an invariance
// (lib/attn/verify/invariance.hpp: the same rows computed two ways, compared
// bit for bit and against the bounds) in one configuration and pass.
struct Cell {
  const Property* property = nullptr;
  const invariance::Invariance* invariance = nullptr;
  bool backward = false;
  Config config;
  std::string id() const {
    return property ? property->id : "invariance:" + invariance->id + (backward ? ":backward" : ":forward");
  }
  std::string name() const {
    return property ? property->name : "invariant: " + invariance->name + (backward ? ", backward" : ", forward");
  }
};
// Every property in every configuration, then every invariance in every
// configuration and pass (a kernel without a backward pass: not supported);
// the smoke profile's invariances in one configuration (fp32 storage with fp32
// sums when claimed, else the first claimed): the comparisons run a kernel
// about 20 times each, and a smoke verdict is the pipeline's check.
std::vector<Cell> cells_of(const BackendInfo& b, const std::string& profile) {
  std::vector<Cell> out;
  const std::vector<Config> configs = configs_of(b);
  for (const Config& c : configs)
    for (const Property& p : props::properties()) out.push_back({&p, nullptr, false, c});
  std::vector<Config> compared = configs;
  if (profile == "smoke" && !configs.empty()) {
    const auto fp32 = std::find_if(configs.begin(), configs.end(), [](const Config& c) {
      return c.precision->name == "fp32" && c.acc == Accumulate::fp32;
    });
    compared = {fp32 != configs.end() ? *fp32 : configs.front()};
  }
  for (const Config& c : compared)
    for (bool backward : {false, true})
      for (const invariance::Invariance& inv : invariance::invariances())
        if (backward ? inv.backward : inv.forward) out.push_back({nullptr, &inv, backward, c});
  return out;
}

// The case with every mask and variant the kernel does not claim removed
// (each tried alone on the plain case), at the configuration's policy.
Case restricted(Case c, const BackendInfo& b, const Config& cfg) {
  c.policy = cfg.acc;
  Case base = c.plain();
  base.mask = MaskKind::none;
  const auto claimed = [&](const Case& x) {
    return b.unsupported_reason(*cfg.precision, cfg.acc, x.shape, x.options()).empty();
  };
  auto with = [&](auto set) {
    Case x = base;
    set(x);
    return claimed(x);
  };
  if (!with([&](Case& x) { x.mask = c.mask, x.window = c.window, x.valid_length = c.valid_length,
                           x.masked_row = c.masked_row, x.masked_keys_begin = c.masked_keys_begin,
                           x.masked_keys_end = c.masked_keys_end; }))
    c.mask = MaskKind::none;
  if (!with([&](Case& x) { x.shape.kv_heads = c.shape.kv_heads; })) c.shape.kv_heads = 0;
  if (!with([&](Case& x) { x.softcap = c.softcap; })) c.softcap.reset();
  if (!with([&](Case& x) { x.sinks = c.sinks; })) c.sinks = Case::Sinks::none;
  if (!with([&](Case& x) { x.alibi = c.alibi; })) c.alibi = Case::Alibi::none;
  if (!with([&](Case& x) { x.documents = c.documents, x.documents_split = c.documents_split; }))
    c.documents = 0, c.documents_split = false;
  return c;
}

std::string slug(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '-';
  return s;
}

void save(const fs::path& dir, const std::string& name, const xt::xtensor<double, 1>& t) { save_npy_atomic((dir / name).string(), t); }

// The counterexample's inputs as .npy files in `dir` and the attend command
// that runs the kernel on them with the verdict (--check).
Json save_counterexample(const fs::path& dir, const Case& c, const BackendInfo& b, const Config& cfg,
                         const std::string& plugin) {
  fs::create_directories(dir);
  const Inputs<double> in = c.inputs(cfg.precision->max_finite, accumulation_max_finite(*cfg.precision, cfg.acc));
  save_npy_atomic((dir / "q.npy").string(), in.q);
  save_npy_atomic((dir / "k.npy").string(), in.k);
  save_npy_atomic((dir / "v.npy").string(), in.v);
  const Options opt = c.options();
  const std::string d = dir.string() + "/";
  // The replay command, and the same problem as attention_lab.attend's keyword arguments (arrays by file name).
  Json kw = Json::object();
  std::string cmd = "attn-lab attend --q " + d + "q.npy --k " + d + "k.npy --v " + d + "v.npy" +
                    (plugin.empty() ? "" : " --plugin " + plugin) + " --backend " + b.name + " --precision " + std::string(cfg.precision->name) + " --accumulate " +
                    std::string(accumulate_name(cfg.acc));
  std::visit(
      [&](const auto& m) {
        using M = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<M, mask::Causal>) cmd += " --mask causal", kw["causal"] = true;
        if constexpr (std::is_same_v<M, mask::SlidingWindow>) cmd += " --mask window:" + std::to_string(m.window), kw["window"] = m.window;
        if constexpr (std::is_same_v<M, mask::KeyPadding>) {
          xt::xtensor<double, 1> t = xt::xtensor<double, 1>::from_shape({m.valid_length.size()});
          for (std::size_t i = 0; i < t.size(); ++i) t(i) = double(m.valid_length[i]);
          save(dir, "keypad.npy", t);
          cmd += " --mask keypad:" + d + "keypad.npy", kw["key_lengths"] = "keypad.npy";
        }
        if constexpr (std::is_same_v<M, mask::Boolean>) {
          xt::xtensor<double, 2> t = xt::xtensor<double, 2>::from_shape(m.allowed.shape());
          for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = m.allowed.data()[i];
          save_npy_atomic(d + "allowed.npy", t);
          cmd += " --mask bool:" + d + "allowed.npy", kw["allowed"] = "allowed.npy";
        }
        if constexpr (std::is_same_v<M, mask::AdditiveBias>) {
          save_npy_atomic(d + "bias.npy", m.bias);
          cmd += " --mask bias:" + d + "bias.npy", kw["bias"] = "bias.npy";
        }
      },
      opt.mask);
  std::ostringstream cap;
  cap.precision(17);
  if (opt.softcap) cap << *opt.softcap, cmd += " --softcap " + cap.str(), kw["softcap"] = *opt.softcap;
  if (opt.sinks) save(dir, "sinks.npy", *opt.sinks), cmd += " --sinks " + d + "sinks.npy", kw["sinks"] = "sinks.npy";
  if (opt.alibi_slopes) save(dir, "alibi.npy", *opt.alibi_slopes), cmd += " --alibi-slopes " + d + "alibi.npy", kw["alibi"] = "alibi.npy";
  if (opt.segments) {
    xt::xtensor<double, 2> t = xt::xtensor<double, 2>::from_shape(opt.segments->shape());
    for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = double(opt.segments->data()[i]);
    save_npy_atomic(d + "segments.npy", t);
    cmd += " --segments " + d + "segments.npy", kw["segments"] = "segments.npy";
  }
  if (opt.threads > 1) cmd += " --threads " + std::to_string(opt.threads), kw["threads"] = opt.threads;
  if (opt.block_q) cmd += " --block-q " + std::to_string(opt.block_q), kw["block_q"] = opt.block_q;
  if (opt.block_k) cmd += " --block-k " + std::to_string(opt.block_k), kw["block_k"] = opt.block_k;
  kw["precision"] = cfg.precision->name;
  kw["accumulate"] = accumulate_name(cfg.acc);
  return {{"case", props::describe(c)}, {"folder", dir.string()}, {"replay", cmd + " --check"}, {"attend", kw}};
}

void append_line(const fs::path& path, const Json& j) {
  std::ofstream f(path, std::ios::app);
  f << dump(j) << "\n";
  f.flush();
  if (!f) throw Error("cannot append to " + path.string());
}

void write_progress(const fs::path& out, std::size_t cell, const std::string& what) {
  std::ofstream f(out / "progress.txt", std::ios::trunc);
  f << cell << "\n" << what << "\n";
}

// One invariance cell: its comparison (kSeed) on the kernel; pass when bitwise
// or within the bounds (which of the two in "invariance"), fail when BEYOND
// (the problem saved, and the attn-lab invariance command that repeats it).
Json run_invariance_cell(const BackendInfo& b, const Cell& cell, std::size_t index, const Settings& s) {
  const fs::path out(s.out);
  write_progress(out, index, cell.name() + ", " + cell.config.name());
  Json j = {{"index", index},   {"kernel", b.name}, {"property", cell.id()}, {"property_name", cell.name()},
            {"config", cell.config.name()}, {"seed", kSeed}, {"cases", 1}};
  Json cmp = {{"backend", b.name}, {"precision", cell.config.precision->name},
              {"accumulate", accumulate_name(cell.config.acc)}, {"pass", cell.backward ? "backward" : "forward"},
              {"invariance", cell.invariance->id}};
  const fs::path dir = out / "counterexamples" / slug(b.name) / (slug(cell.id()) + "-" + slug(cell.config.name()));
  const auto o = invariance::check_into(cmp, *cell.invariance,
                                        {&b, cell.config.precision, cell.config.acc, cell.backward}, kSeed, dir.string());
  j["comparison"] = cmp;
  if (!o) {
    j["status"] = "not supported", j["cases"] = 0;
    j["description"] = cmp["reason"];
  } else if (o->verdict == invariance::Verdict::beyond) {
    j["status"] = "fail";
    j["description"] = cell.invariance->what + ": " + o->first + " (the bound there " + std::to_string(o->tolerance) + ")";
    j["invariance_counterexample"] = {
        {"folder", dir.string()},
        {"replay", "attn-lab invariance" + (s.plugin.empty() ? "" : " --plugin " + s.plugin) + " --backend " + b.name +
                       " --precision " + std::string(cell.config.precision->name) + " --only " + cell.invariance->id +
                       " --seed " + std::to_string(kSeed) + " --out invariance.json"}};
  } else {
    j["status"] = "pass";
    j["invariance"] = invariance::verdict_name(o->verdict);
    j["description"] = std::to_string(o->differing) + " of " + std::to_string(o->compared) +
                       " elements differ (" + cell.invariance->what + ")";
  }
  return j;
}

// One cell: property x configuration under RapidCheck (kSeed, shrinking on).
Json run_cell(const BackendInfo& b, const Cell& cell, std::size_t index, int cases, const Settings& s) {
  if (cell.invariance) return run_invariance_cell(b, cell, index, s);
  const Property& p = *cell.property;
  const fs::path out(s.out);
  props::only_precision() = std::string(cell.config.precision->name);
  int ran = 0;
  std::optional<Case> last_failure;
  std::string not_supported;
  const auto property = [&] {
    const Case c = restricted(*props::gen_case(p.cost_budget), b, cell.config);
    write_progress(out, index, props::describe(c));
    props::backend_runs() = props::backend_refusals() = 0;
    props::under_test() = &b;  // only its runs count (not the baseline's inside a property)
    struct Reset {
      ~Reset() { props::under_test() = nullptr; }
    } reset;
    try {
      p.check(b, c);
    } catch (const Unsupported& e) {
      not_supported = e.what();
      return;  // not counted (a discard would keep RapidCheck at its smallest sizes)
    } catch (const rc::detail::CaseResult& r) {
      if (r.type == rc::detail::CaseResult::Type::Failure) last_failure = c;
      throw;
    } catch (const std::exception& e) {  // e.g. the kernel's own error: a failure of this case
      last_failure = c;
      RC_FAIL(std::string("the call threw: ") + e.what());
    }
    if (props::backend_runs() == 0) {  // the property did not apply, or every run was refused: not counted
      if (props::backend_refusals() > 0) not_supported = props::last_refusal();
      return;
    }
    ++ran;
  };
  rc::detail::TestParams params;
  params.seed = kSeed;
  params.maxSuccess = 3 * cases;  // some cases do not apply to a property or to the kernel (not counted)
  params.maxDiscardRatio = 10;
  const rc::detail::TestResult result = rc::detail::checkTestable(property, rc::detail::TestMetadata{p.id, p.name}, params);
  props::only_precision().clear();
  Json j = {{"index", index},
            {"kernel", b.name},
            {"property", p.id},
            {"property_name", p.name},
            {"config", cell.config.name()},
            {"seed", kSeed},
            {"cases", ran}};
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    j["status"] = "fail";
    j["description"] = failure.description;
    if (last_failure) {
      const fs::path dir = out / "counterexamples" / slug(b.name) / (p.id + "-" + slug(cell.config.name()));
      j["counterexample"] = save_counterexample(dir, *last_failure, b, cell.config, s.plugin);
    }
  } else if (ran == 0) {
    j["status"] = "not supported";
    j["description"] = not_supported.empty() ? "no case of this property could run on the kernel" : not_supported;
  } else {
    j["status"] = "pass";
    j["description"] = std::to_string(ran) + " of " + std::to_string(3 * cases) +
                       " generated cases applied to the property and the kernel's claims";
  }
  return j;
}

// The kernels verified: the plugin's (loaded), or the one built-in backend asked for.
std::vector<std::string> kernels_of(const Settings& s) {
  if (!s.backend.empty()) return {backend_info(s.backend).name};  // Error naming the known ones if unknown
  return load_plugin(s.plugin);
}

const BackendInfo& kernel_row(const Settings& s, const std::string& name) {
  const BackendInfo& b = backend_info(name);
  if (!b.traits.plugin && name != s.backend) throw Error("'" + name + "' is not a plugin's kernel");
  return b;
}

// The short benchmark: the kernel and every built-in backend (but the exact
// one) on the same shapes, precision and thread count, medians of warm calls.
Json bench(const BackendInfo& k, const std::string& profile) {
  Json rows = Json::array();
  const std::vector<std::size_t> ns = profile == "smoke" ? std::vector<std::size_t>{128, 256}
                                                         : std::vector<std::size_t>{256, 1024};
  const std::size_t reps = profile == "smoke" ? 3 : 7;
  for (const Config& cfg : configs_of(k)) {
    if (cfg.acc != cfg.precision->default_accumulate && cfg.acc != Accumulate::fp64) continue;
    for (std::size_t n : ns) {
      const Shape shape{1, 4, n, n, 64, 64};
      const Inputs<double> in = random_inputs(shape, 7);
      for (const BackendInfo& b : all_backends()) {
        if (b.traits.exact || (b.traits.plugin && &b != &k)) continue;
        Json row = {{"backend", b.name}, {"precision", cfg.precision->name}, {"accumulate", accumulate_name(cfg.acc)},
                    {"n", n}, {"d", 64}, {"heads", 4}, {"threads", 1}};
        try {
          const RunReport r = b.run(cfg.precision->name, cfg.acc, in, Options{}, {}, reps);
          row["median_seconds"] = median(r.warm_seconds);
          row["min_seconds"] = *std::min_element(r.warm_seconds.begin(), r.warm_seconds.end());
          row["max_seconds"] = *std::max_element(r.warm_seconds.begin(), r.warm_seconds.end());
          row["gflops"] = flops(shape) / median(r.warm_seconds) / 1e9;
        } catch (const Unsupported& e) {
          row["not_supported"] = e.what();
        }
        rows.push_back(row);
      }
    }
  }
  return rows;
}

// --- The parent ----------------------------------------------------------------

struct Child {
  int status = 0;      // exit status, or -signal
  bool stalled = false;
};

std::string clock_text(double seconds) {
  const long t = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

// The cells' progress on stderr while workers run them: cell k of N, elapsed, and the time left from the mean
// time per finished cell of this kernel (its cells run the same number of cases; verify has no cost model of
// its own). One line rewritten in place on a terminal, a plain line per finished cell elsewhere. Read from the
// workers' cells.jsonl whenever it grows.
struct CellProgress {
  std::string kernel;
  std::size_t total = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::uintmax_t seen_size = 0;
  std::size_t shown = 0;
  bool tty = isatty(2);

  void poll(const fs::path& out) {
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(out / "cells.jsonl", ec);
    if (ec || size == seen_size) return;
    seen_size = size;
    std::size_t done = 0;
    std::ifstream f(out / "cells.jsonl");
    for (std::string line; std::getline(f, line);)
      if (line.find("\"kernel\":" + dump(Json(kernel))) != std::string::npos) ++done;
    if (done == shown) return;
    shown = done;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double left = done ? elapsed / double(done) * double(total - std::min(done, total)) : 0;
    std::fprintf(stderr, "%sverify: %s: %zu of %zu cells done (elapsed %s, about %s left)%s", tty ? "\r\033[K" : "",
                 kernel.c_str(), done, total, clock_text(elapsed).c_str(), clock_text(left).c_str(), tty ? "" : "\n");
    std::fflush(stderr);
  }
  void end() {
    if (tty && shown) std::fprintf(stderr, "\n");
  }
};

// Runs this binary as a worker with its output appended to `log`; stops it
// when progress.txt and cells.jsonl stay unchanged for kStallSeconds.
Child run_worker(const Settings& s, const std::vector<std::string>& extra, CellProgress* progress = nullptr) {
  std::vector<std::string> argv = {s.self, "verify", s.backend.empty() ? "--plugin" : "--backend",
                                   s.backend.empty() ? s.plugin : s.backend, "--profile", s.profile, "--out", s.out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (fs::path(s.out) / "worker.log").string();
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, s.self.c_str(), &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("cannot start a verification worker (" + s.self + "): " + std::strerror(rc));
  Child child;
  auto last_change = std::chrono::steady_clock::now();
  fs::file_time_type seen{};
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      child.status = WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
      return child;
    }
    if (progress) progress->poll(s.out);
    std::error_code ec;
    fs::file_time_type t = fs::last_write_time(fs::path(s.out) / "progress.txt", ec);
    if (!ec && t != seen) seen = t, last_change = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - last_change).count() > kStallSeconds) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      child.status = -SIGKILL;
      child.stalled = true;
      return child;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<Json> read_lines(const fs::path& path) {
  std::vector<Json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(Json::parse(line));
  return out;
}

std::string tail_of(const fs::path& log, std::size_t lines) {
  std::ifstream f(log);
  std::vector<std::string> all;
  for (std::string line; std::getline(f, line);) all.push_back(line);
  std::string s;
  for (std::size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) s += all[i] + "\n";
  return s;
}

std::string markdown(const Json& v) {
  std::ostringstream md;
  md << "# Verdict on " << v["plugin"].get<std::string>() << "\n\n";
  md << "attn-lab verify, profile " << v["profile"].get<std::string>() << ", RapidCheck seed " << kSeed
     << ", cases generated per property and configuration: " << 3 * v["cases_per_cell"].get<int>() << ". Verdict: **"
     << v["verdict"].get<std::string>() << "**.\n\n";
  for (const Json& k : v["kernels"]) {
    md << "## " << k["name"].get<std::string>() << "\n\n" << k["description"].get<std::string>() << "\n\n";
    std::vector<std::string> configs;
    for (const Json& c : k["cells"])
      if (std::find(configs.begin(), configs.end(), c["config"].get<std::string>()) == configs.end())
        configs.push_back(c["config"]);
    if (configs.empty()) md << "It claims no configuration this suite can run.\n\n";
    md << "| property |";
    for (auto& c : configs) md << " " << c << " |";
    md << "\n|---|";
    for (std::size_t i = 0; i < configs.size(); ++i) md << "---|";
    md << "\n";
    std::vector<std::string> props_seen;
    for (const Json& c : k["cells"])
      if (std::find(props_seen.begin(), props_seen.end(), c["property_name"].get<std::string>()) == props_seen.end())
        props_seen.push_back(c["property_name"]);
    for (const std::string& p : props_seen) {
      md << "| " << p << " |";
      for (const std::string& cfg : configs) {
        std::string cell = "";
        for (const Json& c : k["cells"])
          if (c["property_name"] == p && c["config"] == cfg)
            cell = c.contains("invariance") ? c["invariance"].get<std::string>()
                   : c["status"].get<std::string>() +
                         (c["status"] == "pass" ? " (" + std::to_string(c["cases"].get<int>()) + ")" : "");
        md << " " << cell << " |";
      }
      md << "\n";
    }
    md << "\npass (N): N cases ran and held; not supported: no case the property needs is one the kernel claims. "
          "An invariant (lib/attn/verify/invariance.hpp: the same rows computed two ways, fixed problems, seed "
       << kSeed
       << "): bitwise, every bit the same; within bounds, some bits differ, each element by no more than the "
          "two runs' probabilistic bounds; fail, an element beyond them.\n\n";
    for (const Json& c : k["cells"]) {
      if (c["status"] == "pass" || c["status"] == "not supported") continue;
      md << "### " << c["status"].get<std::string>() << ": " << c["property_name"].get<std::string>() << ", "
         << c["config"].get<std::string>() << "\n\n";
      if (c.contains("description")) {  // RapidCheck's report, as a code block
        std::istringstream lines(c["description"].get<std::string>().substr(0, 2000));
        for (std::string line; std::getline(lines, line);) md << "    " << line << "\n";
        md << "\n";
      }
      if (c.contains("counterexample")) {
        md << "Smallest counterexample: `" << c["counterexample"]["case"].get<std::string>()
           << "`; replay (from the folder verify ran in):\n\n    "
           << c["counterexample"]["replay"].get<std::string>() << "\n\n";
      }
      if (c.contains("invariance_counterexample"))
        md << "The problem is saved in " << c["invariance_counterexample"]["folder"].get<std::string>()
           << "; repeat the comparison with:\n\n    " << c["invariance_counterexample"]["replay"].get<std::string>()
           << "\n\n";
      if (c.contains("case")) md << "On the case: `" << c["case"].get<std::string>() << "`\n\n";
    }
    if (k.contains("bench") && !k["bench"].empty()) {
      md << "### Beside the built-in backends (same process run, B = 1, H = 4, d = 64, 1 thread; median of warm calls)\n\n"
            "| backend | precision | n | median s | range s | GFLOP/s |\n|---|---|---:|---:|---:|---:|\n";
      for (const Json& r : k["bench"]) {
        if (r.contains("not_supported")) {
          md << "| " << r["backend"].get<std::string>() << " | " << r["precision"].get<std::string>() << " | "
             << r["n"].get<int>() << " | not supported | | |\n";
          continue;
        }
        char line[256];
        std::snprintf(line, sizeof line, "| %s | %s | %d | %.3g | %.3g-%.3g | %.2f |\n", r["backend"].get<std::string>().c_str(),
                      r["precision"].get<std::string>().c_str(), r["n"].get<int>(), r["median_seconds"].get<double>(),
                      r["min_seconds"].get<double>(), r["max_seconds"].get<double>(), r["gflops"].get<double>());
        md << line;
      }
      md << "\n";
    }
  }
  return md.str();
}

}  // namespace

int worker(const Settings& s, const std::string& job, const std::string& kernel, std::size_t from) {
  const fs::path out(s.out);
  if (job == "list") {
    Json j = {{"kernels", Json::array()}};
    for (const std::string& name : kernels_of(s)) {
      const BackendInfo& b = kernel_row(s, name);
      Json cells = Json::array();
      for (const Cell& c : cells_of(b, s.profile))
        cells.push_back({{"property", c.id()}, {"property_name", c.name()}, {"config", c.config.name()}});
      j["kernels"].push_back({{"name", name}, {"description", b.description}, {"cells", cells}});
    }
    write_file_atomic((out / "kernels.json").string(), dump(j) + "\n");
    return 0;
  }
  if (job != "bench" && job != "cells") throw Error("unknown verify worker job '" + job + "' (list, cells, bench)");
  kernels_of(s);
  const BackendInfo& b = kernel_row(s, kernel);
  if (job == "bench") {
    write_progress(out, 0, "benchmark of " + kernel);
    write_file_atomic((out / ("bench-" + slug(kernel) + ".json")).string(), dump(bench(b, s.profile)) + "\n");
    return 0;
  }
  const std::vector<Cell> cells = cells_of(b, s.profile);
  const int cases = cases_of(s.profile);
  for (std::size_t i = from; i < cells.size(); ++i) {
    std::fprintf(stderr, "verify: %s: cell %zu of %zu: %s, %s\n", kernel.c_str(), i + 1, cells.size(),
                 cells[i].name().c_str(), cells[i].config.name().c_str());
    append_line(out / "cells.jsonl", run_cell(b, cells[i], i, cases, s));
  }
  return 0;
}

int verify(const Settings& s) {
  const int cases = cases_of(s.profile);
  const fs::path out(s.out);
  fs::create_directories(out);
  for (const char* stale : {"cells.jsonl", "progress.txt", "worker.log", "kernels.json"}) fs::remove(out / stale);
  fs::remove_all(out / "counterexamples");
  Json v = {{"plugin", s.backend.empty() ? s.plugin : s.backend}, {"profile", s.profile}, {"seed", kSeed}, {"cases_per_cell", cases},
            {"kernels", Json::array()}};
  const Child list = run_worker(s, {"--worker", "list"});
  if (list.status != 0 || !fs::exists(out / "kernels.json")) {
    const std::string why = tail_of(out / "worker.log", 3);
    throw Error("the plugin could not be used (" +
                (list.status < 0 ? "its loading crashed with signal " + std::to_string(-list.status)
                                 : "exit " + std::to_string(list.status)) +
                "): " + (why.empty() ? "no message" : why.substr(0, why.size() - 1)));
  }
  const Json kernels = Json::parse(std::ifstream(out / "kernels.json"));
  bool failed = false;
  for (const Json& k : kernels["kernels"]) {
    const std::string name = k["name"];
    const std::size_t n_cells = k["cells"].size();
    std::fprintf(stderr, "verify: %s: %zu cells (%d cases each, seed %llu)\n", name.c_str(), n_cells, cases,
                 static_cast<unsigned long long>(kSeed));
    std::size_t from = 0;
    CellProgress progress{name, n_cells};
    while (from < n_cells) {
      const Child c = run_worker(s, {"--worker", "cells", "--kernel", name, "--from", std::to_string(from)}, &progress);
      std::size_t done = 0;
      for (const Json& line : read_lines(out / "cells.jsonl"))
        if (line["kernel"] == name) done = std::max(done, line["index"].get<std::size_t>() + 1);
      if (c.status == 0 && done >= n_cells) break;
      // The worker died (signal, stall or error) during cell `done`: that cell is the plugin's failure.
      std::ifstream progress(out / "progress.txt");
      std::string cell_line, case_line;
      std::getline(progress, cell_line);
      std::getline(progress, case_line);
      const Json& spec = k["cells"][std::min(done, n_cells - 1)];
      const std::string status = c.stalled ? "hang" : c.status < 0 ? "crash" : "error";
      Json rec = {{"index", done},       {"kernel", name}, {"property", spec["property"]},
                  {"property_name", spec["property_name"]}, {"config", spec["config"]}, {"status", status},
                  {"seed", kSeed},       {"cases", 0},     {"case", case_line}};
      rec["description"] = c.stalled ? "no progress for " + std::to_string(int(kStallSeconds)) + " s: stopped"
                           : c.status < 0 ? "the worker running the kernel died of signal " + std::to_string(-c.status) +
                                                " (" + strsignal(-c.status) + ")"
                                          : "the worker exited with status " + std::to_string(c.status) + ": " +
                                                tail_of(out / "worker.log", 2);
      std::fprintf(stderr, "verify: %s: %s in cell %zu (%s): %s\n", name.c_str(), status.c_str(), done,
                   case_line.c_str(), rec["description"].get<std::string>().c_str());
      append_line(out / "cells.jsonl", rec);
      from = done + 1;
    }
    progress.poll(out);
    progress.end();
    Json kj = {{"name", name}, {"description", k["description"]}, {"cells", Json::array()}};
    for (const Json& line : read_lines(out / "cells.jsonl"))
      if (line["kernel"] == name) {
        kj["cells"].push_back(line);
        failed = failed || (line["status"] != "pass" && line["status"] != "not supported");
      }
    std::fprintf(stderr, "verify: %s: the benchmark beside the built-in backends\n", name.c_str());
    const Child b = run_worker(s, {"--worker", "bench", "--kernel", name});
    const fs::path bench_file = out / ("bench-" + slug(name) + ".json");
    kj["bench"] = b.status == 0 && fs::exists(bench_file) ? Json::parse(std::ifstream(bench_file)) : Json::array();
    if (b.status != 0) {
      kj["bench_error"] = b.status < 0 ? "the benchmark crashed (signal " + std::to_string(-b.status) + ")"
                                       : "the benchmark failed: " + tail_of(out / "worker.log", 2);
      failed = true;
    }
    v["kernels"].push_back(kj);
  }
  v["verdict"] = failed ? "FAIL" : "PASS";
  write_file_atomic((out / "verdict.json").string(), dump(v) + "\n");
  write_file_atomic((out / "verdict.md").string(), markdown(v));
  std::fprintf(stderr, "verify: %s; %s\n", failed ? "FAIL" : "PASS", (out / "verdict.md").c_str());
  return failed ? 1 : 0;
}

}  // namespace attn::plugin_verify
