// syncfree._C: the Python wrappers' entry into the operators, beside
// torch.ops.syncfree. A call through torch.ops goes from its Python
// __call__ into torch's generic conversion of the arguments by the op's
// schema (libtorch_python); once a large call has evicted that path from the
// caches it costs up to tens of microseconds more than the call through this
// module (4 to 11 us more at one row of 1e5 labels, 22 to 44 at 32 rows of
// 1e4: docs/benchmarks.md, "The wrappers' own entry"). This module calls the
// same operator through the same dispatcher, so that autograd, the profiler,
// tracing and dispatch modes see the same call; only the conversion of the
// arguments is its own, and it takes only what needs no Python-level
// dispatch:
//   - tensors of type torch.Tensor or torch.nn.Parameter exactly (no
//     subclass: a subclass may override __torch_function__), without named
//     dimensions (torch.ops refuses them; torch 2.11 has them), while no
//     torch function mode is active;
//   - Python ints exactly (not bool) in int64, for int;
//   - Python floats or ints exactly, for float;
//   - True or False, for bool;
//   - None, or what the type takes, for an optional type; torch.Generator
//     exactly, for Generator.
// Any other argument makes call() return NotImplemented, and the wrapper
// goes through torch.ops (which dispatches __torch_function__, converts
// SymInts and reports wrong types). Errors raised by the operator reach
// Python as through torch.ops (torch's HANDLE_TH_ERRORS), warnings too.
//
//   op = _C.find("syncfree::balanced_sample_gather")   # once
//   out = _C.call(op, features, labels, 256, 0.5, 0, True, None, None)
//
// call() takes every argument of the schema, by position, defaults included.
// The module needs Python's headers and libtorch_python; the library
// (libsyncfree.so) registers the operators, and find() looks them up.
#include <Python.h>

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/object_ptr.h>

// Named tensors: torch 2.13 and later have none.
#if __has_include(<ATen/NamedTensor.h>)
#define SYNCFREE_NAMED_TENSORS 1
#else
#define SYNCFREE_NAMED_TENSORS 0
#endif

#include <algorithm>
#include <memory>
#include <vector>

namespace {

constexpr const char* kCapsule = "syncfree._C.operator";

// What call() converts an argument to, and whether None is taken too.
enum class Kind { kTensor, kInt, kFloat, kBool, kGenerator };
struct Arg {
  Kind kind;
  bool optional;
};

struct Entry {
  c10::OperatorHandle op;
  std::vector<Arg> args;
  size_t returns;
};

// The argument's conversion, or false when call() does not convert its type.
bool arg_of(const c10::Type& type, Arg* arg) {
  const auto optional = type.cast<c10::OptionalType>();
  arg->optional = optional != nullptr;
  switch ((optional ? *optional->getElementType() : type).kind()) {
    case c10::TypeKind::TensorType: arg->kind = Kind::kTensor; return true;
    case c10::TypeKind::IntType: arg->kind = Kind::kInt; return true;
    case c10::TypeKind::FloatType: arg->kind = Kind::kFloat; return true;
    case c10::TypeKind::BoolType: arg->kind = Kind::kBool; return true;
    case c10::TypeKind::GeneratorType: arg->kind = Kind::kGenerator; return true;
    default: return false;
  }
}

// find(qualified_name) -> a capsule of the operator and its arguments' conversions.
// Raises RuntimeError for an operator that does not exist, TypeError for one
// whose arguments or returns call() does not convert.
PyObject* find(PyObject* /*module*/, PyObject* name) {
  HANDLE_TH_ERRORS
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "syncfree._C.find: expected an operator's name (str), got %s",
                 Py_TYPE(name)->tp_name);
    return nullptr;
  }
  const char* text = PyUnicode_AsUTF8(name);
  if (text == nullptr) return nullptr;
  const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(text, "");
  const auto& schema = op.schema();
  auto entry = std::make_unique<Entry>(Entry{op, {}, schema.returns().size()});
  for (const auto& argument : schema.arguments()) {
    Arg arg;
    if (!arg_of(*argument.type(), &arg)) {
      PyErr_Format(PyExc_TypeError, "syncfree._C.find: %s: argument %s has type %s, which call() does not convert",
                   text, argument.name().c_str(), argument.type()->str().c_str());
      return nullptr;
    }
    entry->args.push_back(arg);
  }
  if (schema.returns().empty()) {
    PyErr_Format(PyExc_TypeError, "syncfree._C.find: %s returns nothing, and call() returns tensors only", text);
    return nullptr;
  }
  for (const auto& ret : schema.returns()) {
    if (ret.type()->kind() != c10::TypeKind::TensorType) {
      PyErr_Format(PyExc_TypeError, "syncfree._C.find: %s returns a %s, and call() returns tensors only", text,
                   ret.type()->str().c_str());
      return nullptr;
    }
  }
  // The operators live as long as the process: so does their entry.
  PyObject* capsule = PyCapsule_New(entry.get(), kCapsule, nullptr);
  if (capsule != nullptr) entry.release();
  return capsule;
  END_HANDLE_TH_ERRORS
}

// One argument converted onto the stack; false when it is not one that
// call() takes (the caller returns NotImplemented).
bool push(PyObject* value, Arg arg, torch::jit::Stack& stack) {
  if (arg.optional && value == Py_None) {
    stack.emplace_back();
    return true;
  }
  switch (arg.kind) {
    case Kind::kTensor: {
      if (!THPVariable_CheckExact(value)) return false;
      const at::Tensor& tensor = THPVariable_Unpack(value);
#if SYNCFREE_NAMED_TENSORS
      if (tensor.has_names()) return false;
#endif
      stack.emplace_back(tensor);
      return true;
    }
    case Kind::kInt: {
      if (!PyLong_CheckExact(value)) return false;  // bool is a subclass of int
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
      }
      stack.emplace_back(static_cast<int64_t>(v));
      return true;
    }
    case Kind::kFloat:
      if (PyFloat_CheckExact(value)) {
        stack.emplace_back(PyFloat_AS_DOUBLE(value));
        return true;
      }
      if (PyLong_CheckExact(value)) {
        const double v = PyLong_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred()) {
          PyErr_Clear();
          return false;
        }
        stack.emplace_back(v);
        return true;
      }
      return false;
    case Kind::kBool:
      if (value != Py_True && value != Py_False) return false;
      stack.emplace_back(value == Py_True);
      return true;
    case Kind::kGenerator:
      if (Py_TYPE(value) != reinterpret_cast<PyTypeObject*>(THPGeneratorClass)) return false;
      stack.emplace_back(THPGenerator_Unwrap(value));
      return true;
  }
  return false;
}

// One output as torch.ops returns it: a tensor, or None for an undefined
// tensor (find() takes Tensor returns only; None is handled all the same).
PyObject* wrap(c10::IValue&& value) {
  if (value.isNone()) Py_RETURN_NONE;
  return THPVariable_Wrap(std::move(value).toTensor());  // None when undefined
}

// call(op, *arguments) -> the operator's outputs (a tuple of tensors, or the
// one tensor), or NotImplemented when an argument is not one it converts.
PyObject* call(PyObject* /*module*/, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "syncfree._C.call: expected an operator from syncfree._C.find");
    return nullptr;
  }
  const auto* entry = static_cast<const Entry*>(PyCapsule_GetPointer(args[0], kCapsule));
  if (entry == nullptr) return nullptr;  // PyCapsule_GetPointer raised
  const auto given = static_cast<size_t>(nargs - 1);
  if (given != entry->args.size()) {
    PyErr_Format(PyExc_TypeError, "syncfree._C.call: %s takes %zu arguments (every one, by position), got %zu",
                 entry->op.schema().name().c_str(), entry->args.size(), given);
    return nullptr;
  }
  if (at::impl::torch_function_mode_enabled()) Py_RETURN_NOTIMPLEMENTED;
  torch::jit::Stack stack;
  stack.reserve(std::max(given, entry->returns));
  for (size_t i = 0; i < given; ++i) {
    if (!push(args[i + 1], entry->args[i], stack)) Py_RETURN_NOTIMPLEMENTED;
  }
  {
    // As torch.ops does: other Python threads run while the operator does.
    struct ReleasedGil {
      PyThreadState* state = PyEval_SaveThread();
      ~ReleasedGil() { PyEval_RestoreThread(state); }
    } released;
    entry->op.callBoxed(stack);
  }
  if (entry->returns == 1) return wrap(std::move(stack[0]));
  THPObjectPtr out(PyTuple_New(static_cast<Py_ssize_t>(entry->returns)));
  if (!out) return nullptr;
  for (size_t i = 0; i < entry->returns; ++i) {
    PyObject* tensor = wrap(std::move(stack[i]));
    if (tensor == nullptr) return nullptr;
    PyTuple_SET_ITEM(out.get(), static_cast<Py_ssize_t>(i), tensor);
  }
  return out.release();
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"find", find, METH_O,
     "find(qualified_name) -> operator: look up a registered operator for call()."},
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(operator, *arguments) -> outputs, or NotImplemented for an argument that needs "
     "torch.ops (every argument of the schema, by position)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "syncfree._C",
                      "The Python wrappers' entry into the operators (csrc/python/entry.cpp).", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C() {
  PyObject* m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
  // No state of its own but the operators' entries, each written once
  // before its capsule exists: safe without the GIL.
  if (m != nullptr && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
#endif
  return m;
}
