// torch_infini._C: thin bindings over libtorch_infini.so for the Python
// layer, bound by area (bindings.h). Tensors cross only where a compiled
// graph's wrapper calls in (compiler_bindings.cpp, operator_call_bindings.cpp);
// everything else goes through PyTorch's own dispatcher.
#include <c10/util/Exception.h>
#include <nanobind/nanobind.h>

#include "bindings.h"
#include "torch_infini/ops/cpu_fallback.h"

namespace nb = nanobind;

namespace {
// c10 errors become the Python exception types PyTorch itself raises.
void translateErrors(const std::exception_ptr& p, void* /*payload*/) {
  try {
    std::rethrow_exception(p);
  } catch (const c10::IndexError& e) {
    PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
  } catch (const c10::AcceleratorError& e) {
    nb::object error = nb::module_::import_("torch").attr("AcceleratorError");
    PyErr_SetString(error.ptr(), e.what_without_backtrace());
  } catch (const c10::OutOfMemoryError& e) {
    nb::object oom = nb::module_::import_("torch").attr("OutOfMemoryError");
    PyErr_SetString(oom.ptr(), e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "torch_infini native bindings";
  // Compiled graphs keep their kernels (_CompilerKernel) in the modules
  // Inductor generated, which live until the interpreter tears sys.modules
  // down, after this module's types: nanobind's leak report at exit would
  // name every kernel of every compiled graph. The plug-in libraries stay
  // loaded (they are never closed), so nothing is leaked that matters.
  nb::set_leak_warnings(false);
  nb::register_exception_translator(translateErrors);
  // Python initializes the backend lazily (_backend.py), the fallback's
  // routes now: every infini kernel is registered once the library loaded.
  torch_infini::ops::registerFallbackRoutes();
  namespace bindings = torch_infini::bindings;
  bindings::bindSelection(m);
  bindings::bindFallback(m);
  bindings::bindDistributed(m);
  bindings::bindOperators(m);
  bindings::bindMemory(m);
  bindings::bindRandom(m);
  bindings::bindDevices(m);
  bindings::bindCompiler(m);
  bindings::bindOperatorCalls(m);
}
