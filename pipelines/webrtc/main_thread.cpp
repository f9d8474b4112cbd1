#include "main_thread.h"

#include <glib.h>

namespace h3live {

void run_on_main(std::function<void()> work) {
  auto* held = new std::function<void()>(std::move(work));
  g_main_context_invoke_full(
      nullptr, G_PRIORITY_DEFAULT,
      [](gpointer data) -> gboolean {
        (*static_cast<std::function<void()>*>(data))();
        return G_SOURCE_REMOVE;
      },
      held, [](gpointer data) { delete static_cast<std::function<void()>*>(data); });
}

}  // namespace h3live
