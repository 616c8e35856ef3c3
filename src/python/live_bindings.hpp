// escpod._core's live (read-until) classes: LiveClassifier, LiveRead, LiveDecision,
// BalancingPolicy, PolicyAction.
#pragma once

#include <nanobind/nanobind.h>

namespace escpod::python {
void bind_live(nanobind::module_& m);
}
