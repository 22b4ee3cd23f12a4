#include "attn/io/npy.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <xtensor/xnpy.hpp>

#include "attn/core/error.hpp"

namespace attn {

namespace {

struct Raw {
  std::vector<std::size_t> shape;
  std::vector<double> data;
};

template <class T>
void widen(const char* bytes, std::size_t n, std::vector<double>& out) {
  out.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    T x;
    std::memcpy(&x, bytes + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(x);
  }
}

std::string shape_string(const std::vector<std::size_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// IEEE binary16 bits to double, by hand rather than through _Float16 so
// that this file builds with compilers that lack it (clang 14 on x86, which
// builds the fuzz target).
double half_to_double(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);  // zero, subnormal
  if (exponent == 31) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

struct Half {
  std::uint16_t bits;
  explicit operator double() const { return half_to_double(bits); }
};

// The header dictionary, e.g. {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }.
// Our own parser, not xtensor's: the fuzz target found that xtensor's indexes
// outside the string on malformed headers (an empty one, a key without a
// value). Keys in any order; throws Error on anything else.
void parse_header(const std::string& h, std::string& descr, bool& fortran, std::vector<std::size_t>& shape) {
  auto value_of = [&](const std::string& key) {
    const auto k = h.find("'" + key + "'");
    if (k == std::string::npos) throw Error("header has no '" + key + "'");
    auto p = h.find_first_not_of(' ', k + key.size() + 2);
    if (p == std::string::npos || h[p] != ':') throw Error("header key '" + key + "' has no value");
    p = h.find_first_not_of(' ', p + 1);
    if (p == std::string::npos) throw Error("header key '" + key + "' has no value");
    return p;
  };
  std::size_t p = value_of("descr");
  if (h[p] != '\'') throw Error("header 'descr' is not a string");
  const auto end = h.find('\'', p + 1);
  if (end == std::string::npos) throw Error("header 'descr' is not a string");
  descr = h.substr(p + 1, end - p - 1);
  p = value_of("fortran_order");
  if (h.compare(p, 4, "True") == 0) fortran = true;
  else if (h.compare(p, 5, "False") == 0) fortran = false;
  else throw Error("header 'fortran_order' is neither True nor False");
  p = value_of("shape");
  if (h[p] != '(') throw Error("header 'shape' is not a tuple");
  const auto close = h.find(')', p);
  if (close == std::string::npos) throw Error("header 'shape' is not a tuple");
  shape.clear();
  std::size_t i = p + 1;
  while (i < close) {
    while (i < close && (h[i] == ' ' || h[i] == ',')) ++i;
    if (i == close) break;
    if (h[i] < '0' || h[i] > '9') throw Error("header 'shape' holds something other than integers");
    std::size_t d = 0;
    for (; i < close && h[i] >= '0' && h[i] <= '9'; ++i) {
      if (d > (std::numeric_limits<std::size_t>::max() - 9) / 10) throw Error("header 'shape' has a dimension too large");
      d = d * 10 + std::size_t(h[i] - '0');
    }
    if (i < close && h[i] == 'L') ++i;  // Python 2 longs
    while (i < close && h[i] == ' ') ++i;
    if (i < close && h[i] != ',') throw Error("header 'shape' dimensions must be separated by commas");
    shape.push_back(d);
    if (shape.size() > 32) throw Error("header 'shape' has more than 32 dimensions");
  }
}

// Reads a whole .npy of `size` bytes from `in`; `where` prefixes errors.
Raw load_raw(std::istream& in, std::size_t file_size, const std::string& where) {
  Raw raw;
  std::string descr;
  bool fortran = false;
  try {
    // Magic, version, header length, header: read by hand so that a header
    // length beyond the file is refused before anything is allocated (the
    // fuzz target found xtensor's reader allocating whatever length it read).
    unsigned char pre[10] = {};
    in.read(reinterpret_cast<char*>(pre), 8);
    if (!in || std::memcmp(pre, "\x93NUMPY", 6) != 0) throw Error("bad magic string");
    const unsigned major = pre[6], minor = pre[7];
    if (!((major == 1 || major == 2 || major == 3) && minor == 0))
      throw Error("unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
    const std::size_t len_bytes = major == 1 ? 2 : 4;
    in.read(reinterpret_cast<char*>(pre), static_cast<std::streamsize>(len_bytes));
    if (!in) throw Error("truncated header");
    std::size_t header_len = 0;
    for (std::size_t i = len_bytes; i-- > 0;) header_len = header_len * 256 + pre[i];
    if (header_len > file_size - std::min<std::size_t>(file_size, 8 + len_bytes))
      throw Error("header length " + std::to_string(header_len) + " runs past the end of the file");
    std::string header(header_len, '\0');
    in.read(header.data(), static_cast<std::streamsize>(header_len));
    if (!in) throw Error("truncated header");
    parse_header(header, descr, fortran, raw.shape);
  } catch (const Error& e) {
    throw Error(where + "not a valid .npy file (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw Error(where + "not a valid .npy file (" + e.what() + ")");
  }
  if (fortran) throw Error(where + "is Fortran-ordered; save it with numpy.ascontiguousarray first");
  // The element count, and the product of the nonzero extents: xtensor
  // computes strides from every extent in a signed type, so even a shape with
  // a zero extent must not overflow it (found by the fuzz target).
  std::size_t count = 1, extent = 1;
  const std::size_t limit = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(double);
  for (std::size_t d : raw.shape) {
    if (d != 0 && extent > limit / d) throw Error(where + "shape " + shape_string(raw.shape) + " overflows");
    if (d != 0) extent *= d;
    count *= d;
  }
  struct Kind {
    const char* descr;
    std::size_t size;
    void (*widen)(const char*, std::size_t, std::vector<double>&);
  };
  static const Kind kinds[] = {
      {"<f8", 8, widen<double>},       {"<f4", 4, widen<float>}, {"<f2", 2, widen<Half>},
      {"|b1", 1, widen<std::uint8_t>}, {"|u1", 1, widen<std::uint8_t>},
      {"<i4", 4, widen<std::int32_t>}, {"<i8", 8, widen<std::int64_t>}};
  const Kind* kind = nullptr;
  for (const Kind& k : kinds)
    if (descr == k.descr) kind = &k;
  if (!kind)
    throw Error(where + "has dtype '" + descr + "'; expected float64, float32, float16 (or bool, uint8, int32, int64 for masks), little-endian");
  const std::size_t header_end = static_cast<std::size_t>(in.tellg());
  const std::size_t data_bytes = header_end <= file_size ? file_size - header_end : 0;
  if (count != data_bytes / kind->size || data_bytes % kind->size != 0)
    throw Error(where + "holds " + std::to_string(data_bytes) + " data bytes but its header promises " +
                std::to_string(count) + " values of " + std::to_string(kind->size) + " bytes");
  std::vector<char> bytes(count * kind->size);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw Error(where + "could not read its data");
  kind->widen(bytes.data(), count, raw.data);
  return raw;
}

Raw load_raw(const std::string& path, const std::string& what) {
  const std::string where = what + " " + path + ": ";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + "cannot open the file");
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + "cannot read the file size");
  return load_raw(in, file_size, where);
}


template <std::size_t N>
xt::xtensor<double, N> as_tensor(Raw&& raw) {
  std::array<std::size_t, N> shape{};
  std::copy(raw.shape.begin(), raw.shape.end(), shape.begin());
  xt::xtensor<double, N> t = xt::xtensor<double, N>::from_shape(shape);
  std::copy(raw.data.begin(), raw.data.end(), t.begin());
  return t;
}

template <std::size_t N>
xt::xtensor<double, N> load_rank(const std::string& path, const std::string& what) {
  Raw raw = load_raw(path, what);
  if (raw.shape.size() != N)
    throw Error(what + " " + path + ": has shape " + shape_string(raw.shape) + ", expected " +
                std::to_string(N) + " dimension" + (N > 1 ? "s" : ""));
  return as_tensor<N>(std::move(raw));
}

}  // namespace

namespace {
xt::xtensor<double, 4> as_rank4(Raw&& raw, const std::string& where, std::size_t& rank_out) {
  rank_out = raw.shape.size();
  if (rank_out < 2 || rank_out > 4)
    throw Error(where + "has shape " + shape_string(raw.shape) + "; expected [n, d], [heads, n, d] or [batch, heads, n, d]");
  while (raw.shape.size() < 4) raw.shape.insert(raw.shape.begin(), 1);
  return as_tensor<4>(std::move(raw));
}
}  // namespace

NpyTensor load_npy(const std::string& path, const std::string& what) {
  NpyTensor t;
  t.data = as_rank4(load_raw(path, what), what + " " + path + ": ", t.rank);
  return t;
}

NpyTensor load_npy_bytes(const std::string& bytes, const std::string& what) {
  std::istringstream in(bytes, std::ios::binary);
  NpyTensor t;
  t.data = as_rank4(load_raw(in, bytes.size(), what + ": "), what + ": ", t.rank);
  return t;
}

xt::xtensor<double, 1> load_npy_1d(const std::string& path, const std::string& what) {
  return load_rank<1>(path, what);
}
xt::xtensor<double, 2> load_npy_2d(const std::string& path, const std::string& what) {
  return load_rank<2>(path, what);
}
xt::xtensor<double, 2> load_npy_rows(const std::string& path, const std::string& what) {
  Raw raw = load_raw(path, what);
  if (raw.shape.size() == 1) raw.shape.insert(raw.shape.begin(), 1);
  if (raw.shape.size() != 2)
    throw Error(what + " " + path + ": has shape " + shape_string(raw.shape) + ", expected [n] or [rows, n]");
  return as_tensor<2>(std::move(raw));
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + path + " (cannot create " + tmp + ")");
    out << contents;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error("cannot write " + path + " (writing " + tmp + " failed; disk full?)");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot write " + path + " (rename from " + tmp + " failed)");
  }
}

template <std::size_t N>
void save_npy_atomic(const std::string& path, const xt::xtensor<double, N>& t) {
  write_file_atomic(path, xt::dump_npy(t));
}
template void save_npy_atomic(const std::string&, const xt::xtensor<double, 1>&);
template void save_npy_atomic(const std::string&, const xt::xtensor<double, 2>&);
template void save_npy_atomic(const std::string&, const xt::xtensor<double, 3>&);
template void save_npy_atomic(const std::string&, const xt::xtensor<double, 4>&);

}  // namespace attn
