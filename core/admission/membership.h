// The data plane's admission (docs/distributed.md, "What a stranger can do"): Gloo's and NCCL's
// connections are not authenticated, and Gloo's listener pairs whichever socket first names the
// right sequence number. So before a group carries anything of a request, every rank proves over
// the group itself that it holds the token of this run: the ranks all-gather
// HMAC-SHA256(token, run id, generation, rank) and each checks every other rank's proof. A
// stranger that took a rank's place in a connection cannot produce it (its bytes arrive where a
// proof should be), and every rank fails the formation before any real collective.
#pragma once

#include <cstdint>
#include <string>

#include "dist/group.h"

namespace h3::dist {

// The proof `rank` brings for (run_id, generation), 32 raw bytes.
std::string membership_proof(const std::string& token, const std::string& run_id, int64_t generation,
                             int rank);

// Every rank, right after the group formed: throws h3::Error(kDistributed) on every rank, naming
// the rank whose proof failed, when any rank's proof does not verify on any rank.
void prove_membership(Group& g, const std::string& token, const std::string& run_id, int64_t generation);

}  // namespace h3::dist
