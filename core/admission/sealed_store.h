// A view of a c10d store that only holders of the shared token can use (docs/distributed.md,
// "The token"). Anyone who can reach a TCPStore can list, read and write all of its keys, so
// a secret key prefix would hide nothing; instead every key name is replaced by
// HMAC-SHA256(token, name) and every value is sealed with AES-256-GCM under a key derived from
// the token and the run, with the hidden name as authenticated data. A peer without the token
// (which rank 0's front end keeps away from the store: admission/store_front.h) would see opaque
// names and ciphertext: it cannot read the Gloo/NCCL addresses or NCCL ids the ranks exchange,
// cannot plant its own (a forged value fails authentication), and cannot move a value to another
// key. Counters (add) stay bare integers under hidden names: at worst a stranger could disturb
// them, which denies service but admits nobody.
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "admission/crypto.h"

namespace h3::dist {

// `token`: the shared secret (read_token_file); `context`: what the view is bound to (the door's
// run id): names and keys derive from both, so that nothing sealed in one run opens in another.
// The view keeps `inner`'s timeout.
c10::intrusive_ptr<c10d::Store> make_sealed_store(c10::intrusive_ptr<c10d::Store> inner,
                                                  const std::string& token, const std::string& context);

}  // namespace h3::dist
