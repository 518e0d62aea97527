// torch_infini._C: backend selection and the selected runtime's capabilities
// (torch_infini._backend).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "torch_infini/ops/cpu_fallback.h"
#include "torch_infini/runtime/backend_selection.h"
#include "torch_infini/runtime/host_runtime.h"
#include "torch_infini/torch_infini.h"

namespace torch_infini::bindings {

namespace rt = torch_infini::runtime;

void bindSelection(nb::module_& m) {
  // Backend selection.
  m.def("_select_backend", &rt::selectBackend, nb::arg("name"));
  m.def("_requested_backend", &rt::requestedBackend);
  m.def("_is_initialized", &rt::isInitialized);
  m.def("_is_in_bad_fork", &rt::isInBadFork);

  // Parses every setting the runtime and the CPU fallback read (the host
  // device's, TORCH_INFINI_CPU_FALLBACK) as they will be read, initializing
  // nothing: a bad value raises, naming its variable, before `import
  // torch_infini` registers anything.
  m.def("_check_settings", [] {
    rt::HostRuntime::settingsFromEnvironment();
    torch_infini::ops::fallbackMode();
  });
  m.def("_compiled_backends", &rt::compiledBackends);
  m.def("_init", [] { torch_infini::init(); });
  m.def("_backend", &torch_infini::backend);
  m.def("_capabilities", [] {
    rt::Capabilities c = rt::selectedRuntime().capabilities();
    nb::dict d;
    d["async_memcpy"] = c.async_memcpy;
    d["events"] = c.events;
    d["event_timing"] = c.event_timing;
    d["pinned_host"] = c.pinned_host;
    d["async_malloc"] = c.async_malloc;
    d["host_addressable"] = c.host_addressable;
    return d;
  });
}

}  // namespace torch_infini::bindings
