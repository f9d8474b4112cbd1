// libFuzzer target for what a process world's door parses from the network: its records (open,
// hello, verdict, closed), the store front end's handshake and the store session's records.
// Any byte string must be refused (nullopt / false / kBad) or accepted with its invariants; the
// first byte picks what is fuzzed, and for the "sealed" modes the rest is a body that is
// correctly MAC'd, so that the JSON behind a verified MAC (written by a token holder, perhaps
// another version) is fuzzed too. A crash, a sanitizer report or an exception is a bug.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "admission/door_records.h"
#include "admission/store_front.h"
#include "admission/store_session.h"

namespace {

const std::string kToken = "the token of the door fuzzer";
const std::string kChallenge(32, 'c');
const std::string kNonce(32, 'n');

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace h3::dist;
  if (size == 0) return 0;
  const int mode = data[0] % 13;
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
      const std::string greeting = session::greeting(std::string(16, 'g'));
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
    // A store session's records as they arrive from the network: no record of bytes made without
    // the key opens.
    case 10: {
      session::Opener opener(std::string(32, 'k'));
      std::string pending = in, out;
      if (opener.next(pending, out, &why) == session::Opener::Status::kRecord) std::abort();
      break;
    }
    // Traffic sealed and opened again is the same; any byte of it flipped fails.
    case 11: {
      session::Sealer sealer(std::string(32, 'k'));
      std::string wire, out;
      sealer.seal(in.data(), in.size(), wire);
      std::string flipped = wire;
      session::Opener opener(std::string(32, 'k'));
      while (opener.next(wire, out, &why) == session::Opener::Status::kRecord) {
      }
      if (!wire.empty() || out != in) std::abort();
      if (!flipped.empty()) {
        flipped[in.size() % flipped.size()] ^= 0x20;
        session::Opener again(std::string(32, 'k'));
        std::string got;
        auto st = session::Opener::Status::kRecord;
        while (st == session::Opener::Status::kRecord) st = again.next(flipped, got, &why);
        if (st != session::Opener::Status::kBad && st != session::Opener::Status::kNeedMore) std::abort();
        if (got == in) std::abort();
      }
      break;
    }
    case 12:
      if (session::busy_reason(in) != 0 && in.size() != session::kGreetingBytes) std::abort();
      (void)session::busy_text(session::busy_reason(in));
      break;
  }
  return 0;
}
