// check_task (engine/engine.h): the model's condition paths against what a request asks, before
// any picture of it is decoded.
#include "engine/engine.h"
#include "engine/model.h"

namespace h3 {

void check_task(const EngineOptions& opts, const TaskAsk& ask) {
  if (!ask.first_frame && !ask.last_frame && !ask.references) return;  // T2VA: Engine::plan says
  check_task(read_model(opts.model_dir, opts.ref2va), ask);
}

}  // namespace h3
