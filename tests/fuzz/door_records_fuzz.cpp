// libFuzzer target for what a process world's door parses from the network: its records (open,
// hello, verdict, closed) and the store front end's handshake. Any byte string must be refused
// (nullopt / false) or accepted with its invariants; the first byte picks what is fuzzed, and
// for the "sealed" modes the rest is a body that is correctly MAC'd, so that the JSON behind a
// verified MAC (written by a token holder, perhaps another version) is fuzzed too. A crash, a
// sanitizer report or an exception is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dist/door_records.h"
#include "dist/store_front.h"

namespace {

const std::string kToken = "the token of the door fuzzer";
const std::string kChallenge(32, 'c');
const std::string kNonce(32, 'n');

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace h3::dist;
  if (size == 0) return 0;
  const int mode = data[0] % 10;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  static const door::RunKeys keys = door::run_keys(kToken, std::string(32, 'a'));
  std::string why;
  switch (mode) {
    case 0: {
      const auto o = door::verify_open(in, kToken, &why);
      if (o && (o->run_id.size() != 32 || o->challenge.size() != 32)) std::abort();
      break;
    }
    case 1: {
      const auto h = door::verify_hello(in, keys, 1, 1, kChallenge, &why);
      if (h && h->nonce.size() != 32) std::abort();
      break;
    }
    case 2: {
      const auto v = door::read_verdict(in, keys, 1, 1, kNonce, &why);
      if (v && v->admitted && !v->authenticated) std::abort();
      if (v && v->reason.size() > door::kMaxReasonChars + 3) std::abort();
      break;
    }
    case 3: door::verify_closed(in, keys, &why); break;
    case 4: {
      const std::string greeting = "H3S1" + std::string(16, 'g');
      if (store_proof_valid(kToken, greeting, in) && in.size() != 48) std::abort();
      break;
    }
    // A body behind a valid MAC.
    case 5:
      door::verify_open(door::seal_record("open", door::open_records_key(kToken), "", in), kToken, &why);
      break;
    case 6:
      door::verify_hello(
          door::seal_record("hello", keys.record_key, door::hello_context(keys, 1, 1, kChallenge), in), keys,
          1, 1, kChallenge, &why);
      break;
    case 7: {
      const auto v = door::read_verdict(
          door::seal_record("verdict", keys.record_key, door::verdict_context(keys, 1, 1, kNonce), in), keys,
          1, 1, kNonce, &why);
      if (v && !v->authenticated) std::abort();
      break;
    }
    case 8:
      door::verify_closed(door::seal_record("closed", keys.record_key, keys.run_id, in), keys, &why);
      break;
    case 9: (void)door::printable(in); break;
  }
  return 0;
}
