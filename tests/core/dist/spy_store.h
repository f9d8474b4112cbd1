// A c10d store that remembers the last key set through it: the sealed store's tests find the
// hidden name a value went under this way, to tamper with it or move it.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

namespace h3::dist::testing {

struct SpyStore : c10d::HashStore {
  std::string last;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    last = key;
    c10d::HashStore::set(key, value);
  }
};

}  // namespace h3::dist::testing
