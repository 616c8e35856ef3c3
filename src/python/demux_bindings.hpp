// The demultiplexer's part of escpod._core.
#pragma once

#include <nanobind/nanobind.h>

namespace escpod::python {
void bind_demux(nanobind::module_& m);
}
