// libFuzzer target: attn-lab attend's option reading and value parsing on
// arbitrary command lines. The input is split at newlines into arguments;
// Args reads them with attend's option sets, then every value goes through
// the parser attend uses for it. Any outcome but success or one attn::Error
// is a bug. Mask files are read relative to the fuzzer's scratch folder;
// values naming other places ('/') are skipped, so the fuzzer never opens
// /dev/stdin or other special files.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attn/core/error.hpp"
#include "cli/parse.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> argv(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') argv.emplace_back();
    else argv.back() += static_cast<char>(data[i]);
  }
  using attn::cli::Args;
  try {
    const Args args(argv, attn::cli::kAttendValued, attn::cli::kAttendFlags);
    for (const char* o : {"--seed", "--block-q", "--block-k", "--repeat", "--threads"}) args.count(o, 0);
    for (const char* o : {"--logit-scale", "--scale"}) args.real(o, 1.0);
    if (args.has("--random")) attn::cli::parse_counts(args.str("--random"), 6, "--random", "B,H,NQ,NKV,DK,DV");
    const std::string m = args.str("--mask", "none");
    if (m.find('/') == std::string::npos) attn::cli::parse_mask(m, 1 + args.count("--seed", 0) % 4);
  } catch (const attn::Error&) {
  }
  return 0;
}
