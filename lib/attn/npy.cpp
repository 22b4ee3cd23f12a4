#include "attn/npy.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <xtensor/xnpy.hpp>

#include "attn/problem.hpp"

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

Raw load_raw(const std::string& path, const std::string& what) {
  const std::string where = what + " " + path + ": ";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + "cannot open the file");
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + "cannot read the file size");
  Raw raw;
  std::string descr;
  bool fortran = false;
  try {
    unsigned char major = 0, minor = 0;
    xt::detail::read_magic(in, &major, &minor);
    std::string header;
    if (major == 1 && minor == 0) header = xt::detail::read_header_1_0(in);
    else if (major == 2 && minor == 0) header = xt::detail::read_header_2_0(in);
    else throw Error("unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor));
    if (!in) throw Error("truncated header");
    xt::detail::parse_header(header, descr, &fortran, raw.shape);
  } catch (const Error& e) {
    throw Error(where + "not a valid .npy file (" + e.what() + ")");
  } catch (const std::exception& e) {
    throw Error(where + "not a valid .npy file (" + e.what() + ")");
  }
  if (fortran) throw Error(where + "is Fortran-ordered; save it with numpy.ascontiguousarray first");
  std::size_t count = 1;
  for (std::size_t d : raw.shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / d) throw Error(where + "shape overflows");
    count *= d;
  }
  struct Kind {
    const char* descr;
    std::size_t size;
    void (*widen)(const char*, std::size_t, std::vector<double>&);
  };
  static const Kind kinds[] = {
      {"<f8", 8, widen<double>},       {"<f4", 4, widen<float>}, {"<f2", 2, widen<_Float16>},
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

std::string shape_string(const std::vector<std::size_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

template <std::size_t N>
xt::xtensor<double, N> as_tensor(Raw&& raw) {
  std::array<std::size_t, N> shape;
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

xt::xtensor<double, 4> load_npy(const std::string& path, const std::string& what, std::size_t& rank_out) {
  Raw raw = load_raw(path, what);
  rank_out = raw.shape.size();
  if (rank_out < 2 || rank_out > 4)
    throw Error(what + " " + path + ": has shape " + shape_string(raw.shape) +
                "; expected [n, d], [heads, n, d] or [batch, heads, n, d]");
  while (raw.shape.size() < 4) raw.shape.insert(raw.shape.begin(), 1);
  return as_tensor<4>(std::move(raw));
}

xt::xtensor<double, 1> load_npy_1d(const std::string& path, const std::string& what) {
  return load_rank<1>(path, what);
}
xt::xtensor<double, 2> load_npy_2d(const std::string& path, const std::string& what) {
  return load_rank<2>(path, what);
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
