// A request's plan, made against the model folder it runs on (engine/model/model.h): defaults
// resolved, numbers validated, keyframes and references checked and placed.
#pragma once

#include "engine/model/model.h"
#include "h3/request.h"

namespace h3 {

// FL2VA: checks the request's pictures (kInvalidArgument naming first-frame / last-frame and the
// source), records their anchors in `p` and, when the request gives no size, sets p.width and
// p.height to the canvas of the first picture's aspect ratio. Nothing for a T2VA request.
void plan_keyframes(const ModelInfo& m, const GenerationRequest& req, ClipPlan& p);

// Ref2VA: checks the request's references (kInvalidArgument naming "reference N" and the source:
// size, aspect ratio within 1:4..4:1, at most kMaxReferenceImages, not beside keyframes) and
// records the size each is encoded at in `p`: a short edge of m.defaults.reference_short_edge,
// each side rounded (halves to even) to a multiple of 32, as the reference pipelines do. The
// canvas is the request's (width and height together) or the model's default.
void plan_references(const ModelInfo& m, const GenerationRequest& req, ClipPlan& p);

// Resolves 0 fields to the model's defaults and validates the request's numbers.
ClipPlan make_plan(const ModelInfo& m, const GenerationRequest& req);

}  // namespace h3
