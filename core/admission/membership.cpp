#include "admission/membership.h"

#include <ATen/ATen.h>
#include <openssl/crypto.h>

#include <cstring>
#include <vector>

#include "admission/crypto.h"
#include "dist/agree.h"
#include "h3/error.h"

namespace h3::dist {

std::string membership_proof(const std::string& token, const std::string& run_id, int64_t generation,
                             int rank) {
  return hmac_sha256(
      token, "h3 member\n" + run_id + "\n" + std::to_string(generation) + "\n" + std::to_string(rank));
}

void prove_membership(Group& g, const std::string& token, const std::string& run_id, int64_t generation) {
  const std::string mine = membership_proof(token, run_id, generation, g.rank());
  at::Tensor t = at::empty({static_cast<int64_t>(mine.size())}, at::kByte);
  std::memcpy(t.data_ptr(), mine.data(), mine.size());
  LocalFailure failure;
  try {
    const std::vector<at::Tensor> proofs = g.all_gather(t);
    std::string bad;
    for (int r = 0; r < g.size(); ++r) {
      const at::Tensor p = proofs.at(static_cast<size_t>(r)).contiguous();
      const std::string want = membership_proof(token, run_id, generation, r);
      if (p.numel() != static_cast<int64_t>(want.size()) ||
          CRYPTO_memcmp(p.data_ptr(), want.data(), want.size()) != 0) {
        bad += (bad.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    if (!bad.empty()) {
      throw Error(ErrorKind::kDistributed,
                  "rank " + std::to_string(g.rank()) +
                      ": the data plane's proof of the token failed for rank " + bad +
                      " (a peer without this world's token took its place in the group's connections)");
    }
  } catch (...) {
    failure.capture();
  }
  agree_or_throw(g, failure);
}

}  // namespace h3::dist
