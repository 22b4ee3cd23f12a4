// .npy input and output for the CLI, on top of xtensor's npy support:
// loads float64/float32/float16 (and bool/int masks) as double with every
// malformed file reported as one clear Error, and writes atomically.
#pragma once

#include <string>

#include "attn/core/xt.hpp"

namespace attn {

// A tensor of rank 2 to 4 read from .npy, padded at the front to 4
// dimensions, with the rank the file had. The rank travels with the data
// (not through an out-parameter, which a caller could read in the same
// expression before the load wrote it: C++ leaves the order unspecified).
struct NpyTensor {
  xt::xtensor<double, 4> data;
  std::size_t rank = 0;
};

// Loads `path` (C order, little-endian; dtype f8, f4, f2, b1, u1, i4 or i8)
// as double. `what` names the file's role in errors ("--q").
NpyTensor load_npy(const std::string& path, const std::string& what);
// As load_npy, from the bytes of a .npy file in memory (the fuzz target).
NpyTensor load_npy_bytes(const std::string& bytes, const std::string& what);
// As load_npy, for a tensor of exactly `rank` dimensions.
xt::xtensor<double, 1> load_npy_1d(const std::string& path, const std::string& what);
xt::xtensor<double, 2> load_npy_2d(const std::string& path, const std::string& what);
// [n] (as [1, n]) or [rows, n].
xt::xtensor<double, 2> load_npy_rows(const std::string& path, const std::string& what);

// Writes `contents` to a temporary file beside `path`, then renames it over
// `path`: readers never see a half-written file; on failure the old file
// stays and the temporary is removed. Throws Error naming the path.
void write_file_atomic(const std::string& path, const std::string& contents);

// Writes float64 .npy to a temporary file beside `path`, then renames it
// over `path`: a reader never sees a half-written file, and a failure
// leaves what was there before.
template <std::size_t N>
void save_npy_atomic(const std::string& path, const xt::xtensor<double, N>& t);

}  // namespace attn
