#include "engine/stages/stage_memory.h"

#include <unistd.h>

#include <optional>
#include <string>

#include "dist/agree.h"
#include "h3/error.h"

namespace h3::engine_detail {
namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "this host";
  return name;
}

}  // namespace

StreamBudget::Reservation peer_memory_stage(const StageContext& c, const GenerationRequest& request,
                                            const MemoryShape& shape, int64_t limit_bytes,
                                            StreamBudget& budget) {
  std::optional<std::string> mine;
  StreamBudget::Reservation share;
  if (!c.root()) {
    try {
      check_request_memory(c.model, request, c.plan, shape, limit_bytes);
      share = budget.admit(estimate_request_memory(c.model, c.plan, shape).peak(), request_text(c.plan));
    } catch (const std::exception& e) {
      mine = host_name() + ": " + e.what();
    }
  }
  const dist::ErrorAgreement a = dist::agree_error(c.group, mine);
  if (a.failed) {
    throw Error(ErrorKind::kOutOfMemory, "rank " + std::to_string(a.rank) + " on " + a.message);
  }
  return share;
}

}  // namespace h3::engine_detail
