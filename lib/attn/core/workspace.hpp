// Scratch memory of a backend call. A Workspace is a reusable, 64-byte
// aligned buffer that only grows: a benchmark passes the same one to every
// call, so no call pays for allocation or first touch of fresh pages. An
// Arena carves typed pieces out of it; a backend's workspace_bytes() is the
// sum of piece_bytes() of the pieces its run() takes, so the accounting and
// the allocation cannot disagree (take() checks).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "attn/core/tensor_allocator.hpp"

namespace attn {

inline constexpr std::size_t workspace_alignment = tensor_alignment;  // a cache line, as every tensor's

// Bytes a piece of n values of T occupies in an arena (rounded up to the alignment).
template <class T>
constexpr std::size_t piece_bytes(std::size_t n) {
  return (n * sizeof(T) + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
}

class Workspace {
 public:
  // At least `bytes` of aligned scratch; reallocates only to grow. Fresh
  // scratch is filled with 0xFF bytes (NaN as float, double, bf16 and fp16),
  // not left as the zero pages the OS hands out: a kernel that reads scratch
  // it never wrote (a pad it forgot to clear) then returns NaN, which every
  // check sees, instead of a right answer by luck of fresh memory. The fill
  // is the first touch a call pays anyway, once per growth.
  std::byte* reserve(std::size_t bytes) {
    if (bytes > capacity_) {
      data_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{workspace_alignment})));
      std::memset(data_.get(), 0xFF, bytes);
      capacity_ = bytes;
    }
    return data_.get();
  }
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{workspace_alignment}); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t capacity_ = 0;
};

class Arena {
 public:
  Arena(Workspace& ws, std::size_t bytes) : base_(ws.reserve(bytes)), size_(bytes) {}

  // n values of T, uninitialised (T must be trivially copyable).
  template <class T>
  T* take(std::size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::size_t bytes = piece_bytes<T>(n);
    if (used_ + bytes > size_) throw std::logic_error("workspace accounting is smaller than what the backend takes");
    T* p = reinterpret_cast<T*>(base_ + used_);
    used_ += bytes;
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  std::byte* base_;
  std::size_t size_, used_ = 0;
};

}  // namespace attn
