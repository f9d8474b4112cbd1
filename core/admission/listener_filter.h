// Gloo's listener admits the world's members only (docs/distributed.md, "What a stranger can
// do"). Gloo's TCP listener accepts any connection and pairs whichever names the expected sequence
// number first; a paired peer that then sends a malformed frame makes Gloo's event loop throw where
// nothing catches it, and the process aborts (gloo/transport/tcp/pair.cc), as does an accept that
// fails for want of descriptors. Gloo itself cannot be told whom to accept, but its listening socket
// is an ordinary socket of this process: a classic BPF socket filter attached to it makes the
// kernel drop every packet, the connection's SYN first, whose source address is not a member's, so
// a stranger on another host never reaches Gloo at all (the sockets of accepted connections inherit
// the filter). A local user of a member's host shares its address and is not kept out: the same
// trust as for the store, which listens on loopback.
#pragma once

#include <vector>

#include "admission/proc_sockets.h"

namespace h3::dist {

// This host's source address on the route to `to` (a UDP connect picks the route; nothing is
// sent). Throws h3::Error(kDistributed) when there is no route.
IpAddress source_address_towards(const IpAddress& to);

// Attaches the filter to listening socket `fd`: packets from `members` pass, every other is
// dropped. Throws h3::Error(kDistributed) if the kernel refuses it.
void admit_only(int fd, const std::vector<IpAddress>& members);

// Connections from addresses that are not members, which `listener` took before its filter was
// attached, are shut down (their owner, Gloo's listener, sees them fail and drops them). Returns
// how many. Waits up to `wait_ms` for ones still in the accept queue to be accepted, then throws
// h3::Error(kDistributed).
int shut_out_strangers(const ListeningSocket& listener, const std::vector<IpAddress>& members, int wait_ms);

}  // namespace h3::dist
