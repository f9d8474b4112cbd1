#include "settings_checks.h"

namespace h3gst {

bool check_settings(GstElement* element, const Settings& s) {
  // The engine reads 0 as "the model's default"; the element spells that -1, so
  // an explicit 0 is a mistake to report, not a default to apply.
  if (const char* zero = explicit_zero(s)) {
    GST_ELEMENT_ERROR(
        element, RESOURCE, SETTINGS,
        ("Property %s=0 is not a valid request: set a positive value, or -1 for the model's default", zero),
        (nullptr));
    return false;
  }
  if (s.pace == Pace::kSteps && s.sampler != h3::Sampler::kCausal) {
    GST_ELEMENT_ERROR(
        element, RESOURCE, SETTINGS,
        ("pace=steps needs sampler=causal: it lowers the forwards per chunk of the chunk-causal "
         "sampler, and the euler sampler denoises the whole clip on one grid. Set sampler=causal, "
         "or pace=off"),
        (nullptr));
    return false;
  }
  if (s.embeds.empty() && s.prompt.empty()) {
    GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS,
                      ("No prompt: set prompt, or prompt-embeds to an embeddings file"), (nullptr));
    return false;
  }
  if (!s.embeds.empty() && !g_file_test(s.embeds.c_str(), G_FILE_TEST_IS_REGULAR)) {
    GST_ELEMENT_ERROR(
        element, RESOURCE, NOT_FOUND,
        ("prompt-embeds file '%s' does not exist: point prompt-embeds at an embeddings .safetensors "
         "file, or unset it to use the prompt",
         s.embeds.c_str()),
        (nullptr));
    return false;
  }
  return true;
}

}  // namespace h3gst
