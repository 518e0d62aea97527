// torch.ops.infini operators called from a compiled graph's wrapper without
// OpOverload's Python layer.
//
// Inductor's wrapper calls each fused operator of a graph (the graph passes'
// rewrites) as `torch.ops.infini.<op>.default(...)`: a Python frame, a
// __torch_function__ check of every argument, and TorchScript's generic
// conversion of the arguments to IValues, about 2 us a call before the
// dispatcher is reached (measured on the Llama's decoding step: 39 % of a
// fused call's time). OperatorCall reads the arguments by the schema's
// types, which it classified once, and calls the same operator through the
// same dispatcher (`callBoxed`: autograd, autocast, Python modes, the
// profiler and the kernel as before). Anything it does not read itself (a
// Tensor subclass, an argument type it does not know, an active
// __torch_function__ mode) goes to the OpOverload it was made from.
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <vector>

#include "bindings.h"

namespace torch_infini::bindings {
namespace {

// The argument types read here; Other sends the call to the OpOverload.
enum class Kind { Tensor, OptionalTensor, Float, Int, Bool, IntList, Other };

Kind kindOf(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return Kind::Tensor;
    case c10::TypeKind::FloatType:
      return Kind::Float;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return Kind::Int;
    case c10::TypeKind::BoolType:
      return Kind::Bool;
    case c10::TypeKind::OptionalType:
      return type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
                     c10::TypeKind::TensorType
                 ? Kind::OptionalTensor
                 : Kind::Other;
    case c10::TypeKind::ListType: {
      const c10::TypeKind element = type->castRaw<c10::ListType>()->getElementType()->kind();
      return element == c10::TypeKind::IntType || element == c10::TypeKind::SymIntType
                 ? Kind::IntList
                 : Kind::Other;
    }
    default:
      return Kind::Other;
  }
}

// `value` as an argument of `kind` on `stack`; false where it is not read here.
bool push(Kind kind, PyObject* value, torch::jit::Stack& stack) {
  switch (kind) {
    case Kind::OptionalTensor:
      if (value == Py_None) {
        stack.emplace_back();
        return true;
      }
      [[fallthrough]];
    case Kind::Tensor:
      if (!THPVariable_CheckExact(value)) return false;  // subclasses keep __torch_function__
      stack.emplace_back(THPVariable_Unpack(value));
      return true;
    case Kind::Float:
      if (PyFloat_CheckExact(value)) {
        stack.emplace_back(PyFloat_AS_DOUBLE(value));
        return true;
      }
      if (!PyLong_CheckExact(value)) return false;
      stack.emplace_back(PyLong_AsDouble(value));
      return !PyErr_Occurred() || (PyErr_Clear(), false);
    case Kind::Int: {
      if (!PyLong_CheckExact(value)) return false;  // bool, SymInt, numpy: the OpOverload's
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow != 0) return false;
      stack.emplace_back(static_cast<int64_t>(v));
      return true;
    }
    case Kind::Bool:
      if (!PyBool_Check(value)) return false;
      stack.emplace_back(value == Py_True);
      return true;
    case Kind::IntList: {
      if (!PyTuple_CheckExact(value) && !PyList_CheckExact(value)) return false;
      const Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
      PyObject** items = PySequence_Fast_ITEMS(value);
      std::vector<int64_t> list(static_cast<size_t>(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!PyLong_CheckExact(items[i])) return false;
        int overflow = 0;
        list[static_cast<size_t>(i)] = PyLong_AsLongLongAndOverflow(items[i], &overflow);
        if (overflow != 0) return false;
      }
      stack.emplace_back(std::move(list));
      return true;
    }
    case Kind::Other:
      return false;
  }
  return false;
}

nb::object toPython(c10::IValue&& value) {
  if (value.isTensor()) return nb::steal(THPVariable_Wrap(std::move(value).toTensor()));
  if (value.isNone()) return nb::none();
  TORCH_INTERNAL_ASSERT(false, "OperatorCall: an output that is not a Tensor: ", value.tagKind());
}

class OperatorCall {
 public:
  OperatorCall(const std::string& name, const std::string& overload, nb::object python_op)
      : op_(c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str())),
        fallback_(std::move(python_op)) {
    const c10::FunctionSchema& schema = op_.schema();
    for (const c10::Argument& argument : schema.arguments()) {
      kinds_.push_back(kindOf(argument.type()));
      names_.push_back(argument.name());
      readable_ = readable_ && kinds_.back() != Kind::Other;
    }
    for (const c10::Argument& result : schema.returns()) {
      readable_ = readable_ && result.type()->kind() == c10::TypeKind::TensorType;
    }
    readable_ = readable_ && !schema.is_vararg() && !schema.is_varret();
  }

  nb::object call(nb::args args, nb::kwargs kwargs) {
    torch::jit::Stack stack;
    if (!readable_ || at::impl::torch_function_mode_enabled() || !read(args, kwargs, stack)) {
      return fallback_(*args, **kwargs);
    }
    try {
      torch::PyWarningHandler warnings;  // TORCH_WARN becomes a Python warning, as in OpOverload
      try {
        nb::gil_scoped_release released;
        op_.callBoxed(stack);
      } catch (const std::exception&) {
        warnings.set_in_exception();
        throw;
      }
    } catch (python_error& e) {  // a Python error raised under the call, or a warning made one
      e.restore();
      throw nb::python_error();
    }
    if (stack.empty()) return nb::none();  // `-> ()`: None, as the OpOverload returns
    if (stack.size() == 1) return toPython(std::move(stack[0]));
    nb::list results;
    for (c10::IValue& value : stack) results.append(toPython(std::move(value)));
    return nb::tuple(results);
  }

  std::string name() const { return op_.schema().operator_name().name; }

 private:
  // The arguments in schema order, defaults filled in; false where one is
  // not read here.
  bool read(const nb::args& args, const nb::kwargs& kwargs, torch::jit::Stack& stack) const {
    const std::vector<c10::Argument>& arguments = op_.schema().arguments();
    const size_t positional = args.size();
    if (positional > arguments.size()) return false;
    size_t used_kwargs = 0;
    stack.reserve(arguments.size());
    for (size_t i = 0; i < arguments.size(); ++i) {
      PyObject* value = nullptr;
      if (i < positional) {
        value = args[i].ptr();
      } else if (kwargs.size() > 0 && kwargs.contains(names_[i].c_str())) {
        value = kwargs[names_[i].c_str()].ptr();
        ++used_kwargs;
      }
      if (value == nullptr) {
        if (!arguments[i].default_value().has_value()) return false;
        stack.push_back(*arguments[i].default_value());
      } else if (!push(kinds_[i], value, stack)) {
        return false;
      }
    }
    return used_kwargs == kwargs.size();
  }

  c10::OperatorHandle op_;
  nb::object fallback_;
  std::vector<Kind> kinds_;
  std::vector<std::string> names_;
  bool readable_ = true;
};

}  // namespace

void bindOperatorCalls(nb::module_& m) {
  nb::class_<OperatorCall>(m, "_OperatorCall",
                           "An operator called as its OpOverload would be, through the "
                           "dispatcher, without the OpOverload's Python layer.")
      .def(nb::init<const std::string&, const std::string&, nb::object>(), nb::arg("name"),
           nb::arg("overload"), nb::arg("python_op"))
      .def("__call__", &OperatorCall::call)
      .def_prop_ro("name", &OperatorCall::name);
}

}  // namespace torch_infini::bindings
