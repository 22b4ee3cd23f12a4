// The CLI's parsing of option values, apart from main.cpp so that the
// fuzz target (fuzz/cli_fuzz.cpp) runs exactly this code: the option sets of
// `attend`, comma-separated counts, and masks.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "attn/core/mask.hpp"
#include "cli/args.hpp"

namespace attn::cli {

inline const std::set<std::string> kAttendValued = {
    "--q", "--k", "--v", "--random", "--seed", "--logit-scale", "--backend", "--precision", "--accumulate", "--scale",
    "--mask", "--block-q", "--block-k", "--out", "--weights", "--lse", "--repeat", "--threads",
    "--grad-out", "--dq", "--dk", "--dv", "--dbias", "--dsinks"};
inline const std::set<std::string> kAttendFlags = {"--check", "--json", "--allow-nonfinite", "--force", "--help",
                                                   "--backward"};

// Exactly n comma-separated non-negative integers; `form` names them in the
// error ("B,H,NQ,NKV,DK,DV").
std::vector<std::size_t> parse_counts(const std::string& s, std::size_t n, const std::string& what,
                                      const std::string& form);

// none | causal | window:W | keypad:FILE | bool:FILE | bias:FILE (files are .npy).
Mask parse_mask(const std::string& m, std::size_t batch);

}  // namespace attn::cli
