// attn-lab verify: the verdict on a kernel this suite did not write (a
// plugin, attn/registry/plugin.hpp). For every configuration the kernel claims
// (storage precision x accumulation), every property of the suite
// (lib/attn/verify/properties.hpp) runs under RapidCheck with cases restricted to
// the masks and variants it claims; a failure is shrunk, its inputs saved as
// .npy files with the one `attn-lab attend` command that replays them; then
// a short benchmark beside the built-in backends, in the same process run.
//
// The plugin is untrusted: every call of it happens in a child process (this
// same binary, `attn-lab verify --worker ...`), so a crash is that plugin's
// failure, reported with the cell and the case it crashed on, and the
// verification goes on from the next cell.
#pragma once

#include <string>

namespace attn::plugin_verify {

struct Settings {
  std::string plugin;   // the library's path (or python:MODULE:FUNCTION); empty with `backend`
  std::string backend;  // a built-in backend to verify instead of a plugin's kernels
  std::string profile;  // smoke, quick, full: cases per property 10, 30, 100
  std::string out;      // the verdict folder
  std::string self;     // this executable (the workers run it)
};

// The whole verification; returns the exit status: 0 every claimed cell
// passed, 1 a property failed (or the kernel crashed), 2 the plugin could
// not be used. Writes verdict.md and verdict.json (and counterexamples/)
// into s.out; progress on stderr.
int verify(const Settings& s);

// The child's side (hidden options of `attn-lab verify`): `list` writes the
// kernels and their cells as JSON to `out`; `cells` runs kernel `kernel`'s
// cells from index `from` on, appending one JSON line per finished cell to
// `out`/cells.jsonl; `bench` times the kernel beside the built-in backends.
int worker(const Settings& s, const std::string& job, const std::string& kernel, std::size_t from);

}  // namespace attn::plugin_verify
