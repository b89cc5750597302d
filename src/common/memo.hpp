// A process-wide memo of a pure, costly host computation (a plan, a driver query) keyed by its
// inputs: thread-safe, and bounded so a process sweeping shapes does not grow it forever.
#pragma once
#include <cstddef>
#include <map>
#include <mutex>

namespace weave {

template <class Key, class Value>
class Memo {
 public:
  explicit Memo(std::size_t max_entries = 4096) : max_entries_(max_entries) {}

  // The value for `key`: computed by make() on the first call (under the lock, so once per key;
  // make() must not use this memo), then returned from the memo. A make() that throws leaves
  // nothing behind.
  template <class Make>
  Value get(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = map_.find(key); it != map_.end()) return it->second;
    Value value = make();
    if (map_.size() >= max_entries_) map_.clear();
    map_.emplace(key, value);
    return value;
  }

 private:
  std::size_t max_entries_;
  std::mutex mu_;
  std::map<Key, Value> map_;
};

}  // namespace weave
