// torch_infini._C: the compiler plug-ins (torch_infini._compiler): find one
// per device type, compile, load, look kernels up and launch them on the
// current infini stream.
#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstring>

#include "bindings.h"
#include "torch_infini/compiler/plugin.h"
#include "torch_infini/compiler/triton_compiler.h"
#include "torch_infini/runtime/allocator.h"
#include "torch_infini/runtime/stream.h"

namespace torch_infini::bindings {

namespace compiler = torch_infini::compiler;

namespace {

// One 8-byte slot per argument, as the plug-in interface passes them:
// kinds[i] is 'p' (an infini tensor's data pointer, or a pointer as an
// int), 'i' (int64_t) or 'f' (double). Tensors are read here rather than in
// Python: this runs once per kernel launch of every compiled graph. `who`
// prefixes the messages ("kernel 'name': "), or is empty.
using Slots = c10::SmallVector<uint64_t, 16>;

template <typename Args>
Slots slotsOf(const Args& args, size_t n, std::string_view kinds, std::string_view who) {
  Slots slots(n);
  for (size_t i = 0; i < n; ++i) {
    nb::object arg = args[i];  // owned: args[i] may make a new object
    if (kinds[i] == 'f') {
      const double value = nb::cast<double>(arg);
      std::memcpy(&slots[i], &value, sizeof value);
    } else if (kinds[i] == 'p' && THPVariable_Check(arg.ptr())) {
      const at::Tensor& tensor = THPVariable_Unpack(arg.ptr());
      TORCH_CHECK_TYPE(tensor.device().type() == c10::DeviceType::PrivateUse1, who, "argument ", i,
                       " must be an infini tensor, got ", tensor.device());
      slots[i] = reinterpret_cast<uint64_t>(tensor.data_ptr());
    } else {
      TORCH_CHECK_TYPE(PyLong_Check(arg.ptr()), who, "argument ", i, ": expected ",
                       kinds[i] == 'p' ? "an infini tensor or an address" : "an int", ", got ",
                       nb::inst_name(arg).c_str());
      const int64_t value = nb::cast<int64_t>(arg);
      std::memcpy(&slots[i], &value, sizeof value);
    }
  }
  return slots;
}

// A kernel with its argument kinds: what a compiled graph's wrapper calls,
// `kernel.launch(device, *args)`, once per kernel per call (no Python frame
// in between).
struct BoundKernel {
  nb::object kernel;  // the _CompilerKernel
  std::string name;
  std::string kinds;
  std::string who;  // "kernel 'name': "

  void launch(int64_t device, nb::args args) const {
    const size_t n = args.size();
    TORCH_CHECK_VALUE(n == kinds.size(), "kernel '", name, "' takes ", kinds.size(),
                      " arguments, got ", n);
    const Slots slots = slotsOf(args, n, kinds, who);
    void* stream = torch_infini::nativeStream(torch_infini::currentStream(deviceArg(device)));
    nb::inst_ptr<compiler::Kernel>(kernel)->launch(slots.data(), slots.size(), kOneDim, kOneDim, 0,
                                                   stream);
  }
  static constexpr std::array<uint32_t, 3> kOneDim{1, 1, 1};
};

}  // namespace

c10::ScalarType dtypeArg(nb::handle dtype) {
  TORCH_CHECK_TYPE(THPDtype_Check(dtype.ptr()), "dtype must be a torch.dtype, got ",
                   nb::inst_name(dtype).c_str());
  return reinterpret_cast<THPDtype*>(dtype.ptr())->scalar_type;
}

namespace {

// torch.empty_strided(size, stride, dtype=dtype, device="infini") without
// Python's argument parsing or the dispatcher: what compiled graphs
// allocate their buffers with (Inductor's empty_strided_cpu/_cuda).
nb::object emptyStrided(const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                        nb::handle dtype) {
  at::Tensor tensor = at::detail::empty_strided_generic(
      size, stride, torch_infini::deviceAllocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dtypeArg(dtype));
  return nb::steal(THPVariable_Wrap(std::move(tensor)));
}

// The nvidia plug-in's Triton compiler: `compile(source, options) -> bytes`
// (torch_infini/_triton.py), called with the GIL from the plug-in's compile
// (which torch.compile calls with the GIL released).
void setTritonCompiler(nb::object compile) {
  // Never destroyed: the plug-in may compile until the process exits, and a
  // Python object must not be freed after the interpreter.
  auto* held = new nb::object(std::move(compile));
  compiler::setTritonCompiler([held](std::string_view source, std::string_view options) {
    nb::gil_scoped_acquire gil;
    try {
      nb::object binary =
          (*held)(nb::str(source.data(), source.size()), nb::str(options.data(), options.size()));
      return std::string(nb::cast<nb::bytes>(binary).c_str(), nb::len(binary));
    } catch (nb::python_error& e) {
      // "TypeError: message", without the traceback what() carries.
      const std::string type = nb::cast<std::string>(e.type().attr("__name__"));
      throw std::runtime_error(type + ": " + nb::cast<std::string>(nb::str(e.value())));
    }
  });
}

}  // namespace

void bindCompiler(nb::module_& m) {
  nb::class_<compiler::Kernel>(m, "_CompilerKernel")
      .def_prop_ro("name", &compiler::Kernel::name)
      .def_prop_ro("num_args", &compiler::Kernel::numArgs)
      .def(
          "launch",
          [](const compiler::Kernel& kernel, nb::handle args, std::string_view kinds,
             int64_t device, std::array<uint32_t, 3> grid, std::array<uint32_t, 3> block,
             size_t shared_memory) {
            const size_t n = nb::len(args);
            TORCH_CHECK_VALUE(n == kinds.size(), "kernel '", kernel.name(), "': ", n,
                              " arguments for ", kinds.size(), " argument kinds");
            const Slots slots = slotsOf(args, n, kinds, "");
            void* stream =
                torch_infini::nativeStream(torch_infini::currentStream(deviceArg(device)));
            kernel.launch(slots.data(), slots.size(), grid, block, shared_memory, stream);
          },
          nb::arg("args"), nb::arg("kinds"), nb::arg("device"),
          nb::arg("grid") = std::array<uint32_t, 3>{1, 1, 1},
          nb::arg("block") = std::array<uint32_t, 3>{1, 1, 1}, nb::arg("shared_memory") = 0,
          "Queues the kernel on `device`'s current infini stream.")
      .def(
          "bind",
          [](nb::object self, std::string name, std::string kinds) {
            std::string who = "kernel '" + name + "': ";
            return BoundKernel{std::move(self), std::move(name), std::move(kinds), std::move(who)};
          },
          nb::arg("name"), nb::arg("kinds"),
          "This kernel with its argument kinds, launched as `launch(device, *args)`.");

  nb::class_<BoundKernel>(m, "_BoundKernel")
      .def_ro("name", &BoundKernel::name)
      .def_ro("_kernel", &BoundKernel::kernel)
      .def_ro("kinds", &BoundKernel::kinds)
      .def("launch", &BoundKernel::launch,
           "Queues the kernel on `device`'s current infini stream.");
  m.def("_compiler_kernel_launches", &compiler::Kernel::launches,
        "Kernel launches through compiler plug-ins so far, in this process.");

  nb::class_<compiler::Module>(m, "_CompilerModule")
      .def("kernel", [](const compiler::Module& module, const std::string& name) {
        return module.kernel(name);
      });

  nb::class_<compiler::Plugin>(m, "_CompilerPlugin")
      .def_prop_ro("name", &compiler::Plugin::name)
      .def_prop_ro("device_type", &compiler::Plugin::deviceType)
      .def_prop_ro("source_language", &compiler::Plugin::sourceLanguage)
      .def_prop_ro("origin", &compiler::Plugin::origin)
      .def(
          "compile",
          [](const compiler::Plugin& plugin, const std::string& source,
             const std::string& options) {
            std::vector<uint8_t> binary;
            {
              nb::gil_scoped_release release;  // a compiler runs for seconds
              binary = plugin.compile(source, options);
            }
            return nb::bytes(reinterpret_cast<const char*>(binary.data()), binary.size());
          },
          nb::arg("source"), nb::arg("options") = "")
      .def("runtime_source", &compiler::Plugin::runtimeSource)
      .def("pass_pipeline", &compiler::Plugin::passPipeline)
      .def("load", [](const compiler::Plugin& plugin, nb::bytes binary) {
        const auto* data = static_cast<const uint8_t*>(binary.data());
        return plugin.load(std::vector<uint8_t>(data, data + binary.size()));
      });

  m.def("_compiler_plugin", &compiler::pluginFor, nb::arg("device_type"));
  m.def("_compiler_set_triton_compiler", &setTritonCompiler, nb::arg("compile"),
        "Registers the nvidia plug-in's Triton compiler: compile(source, options) -> bytes.");
  m.def("_compiler_empty_strided", &emptyStrided, nb::arg("size"), nb::arg("stride"),
        nb::arg("dtype"),
        "An uninitialized infini tensor on the current device (compiled graphs' buffers).");
  m.def("_compiler_load_external", &compiler::loadExternal, nb::arg("path"));
  m.def("_compiler_add_external", &compiler::addExternal, nb::arg("path"));
  m.def("_compiler_builtin_device_types", &compiler::builtinDeviceTypes);
}

}  // namespace torch_infini::bindings
