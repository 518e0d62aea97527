// torch_infini._C: the devices' default generators (torch.infini.random).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <mutex>

#include "bindings.h"
#include "torch_infini/runtime/generator.h"
#include "torch_infini/torch_infini.h"

namespace torch_infini::bindings {

void bindRandom(nb::module_& m) {
  // The default generator of a device (-1: current), under its mutex.
  auto withGenerator = [](int64_t device, auto fn) {
    at::Generator gen = torch_infini::defaultGenerator(deviceArg(device));
    std::lock_guard<std::mutex> lock(gen.mutex());
    return fn(*gen.get<torch_infini::InfiniGenerator>());
  };
  m.def("_rng_manual_seed", [withGenerator](int64_t device, uint64_t seed) {
    withGenerator(device, [seed](torch_infini::InfiniGenerator& g) {
      g.set_current_seed(seed);
      return 0;
    });
  });
  m.def("_rng_seed", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) { return g.seed(); });
  });
  m.def("_rng_initial_seed", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) { return g.current_seed(); });
  });
  m.def("_rng_get_state", [withGenerator](int64_t device) {
    return withGenerator(device, [](torch_infini::InfiniGenerator& g) {
      return std::make_pair(g.current_seed(), g.get_offset());
    });
  });
  m.def("_rng_set_state", [withGenerator](int64_t device, uint64_t seed, uint64_t offset) {
    withGenerator(device, [seed, offset](torch_infini::InfiniGenerator& g) {
      g.set_current_seed(seed);
      g.set_offset(offset);
      return 0;
    });
  });
}

}  // namespace torch_infini::bindings
