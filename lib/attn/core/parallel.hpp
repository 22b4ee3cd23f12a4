// parallel_for: items 0 .. count - 1 handed out one at a time (an atomic
// counter, so uneven items such as causal query blocks balance) to
// `threads` workers: the calling thread and threads - 1 std::threads started
// for the call (a few tens of microseconds, against the milliseconds of an
// attention call). body(item, worker) runs once per item; worker < threads
// indexes per-worker scratch. The first exception a worker throws stops the
// hand-out and is rethrown to the caller after every worker has joined.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace attn {

template <class Body>
void parallel_for(std::size_t count, std::size_t threads, Body&& body) {
  threads = std::max<std::size_t>(1, std::min(threads, count));
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](std::size_t worker) {
    try {
      for (std::size_t item; (item = next.fetch_add(1)) < count;) body(item, worker);
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::size_t w = 1; w < threads; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace attn
