// What the ops share (see common.h), and the library's TORCH_LIBRARY block.
#include "ops/common.h"

#include <torch/library.h>

#include <limits>
#include <new>
#include <sstream>
#include <string>
#include <typeinfo>

namespace syncfree {
namespace ops {

bool is_supported_label_dtype(at::ScalarType t) {
  switch (t) {
    case at::kBool:
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
    case at::kUInt16:
    case at::kUInt32:
    case at::kUInt64:
      return true;
    default:
      return false;
  }
}

void check_label_dtype(const char* op, const at::Tensor& labels) {
  TORCH_CHECK(is_supported_label_dtype(labels.scalar_type()), "syncfree.", op,
              ": labels must be bool or an integer tensor (uint8, int8, int16, int32, int64, "
              "uint16, uint32, uint64), got dtype ",
              labels.scalar_type());
}

void check_labels(const char* op, const at::Tensor& labels) {
  TORCH_CHECK(labels.defined(), "syncfree.", op, ": labels must be a defined tensor");
  TORCH_CHECK(labels.dim() >= 1, "syncfree.", op,
              ": labels must have at least 1 dimension (shape [..., N]), got a 0-dim tensor");
  check_label_dtype(op, labels);
}

namespace {

// Bytes of one output slot of a sampler: an int64 index and a bool.
constexpr int64_t kSlotBytes = 8 + 1;

}  // namespace

void check_num_samples(const char* op, const at::Tensor& labels, int64_t num_samples) {
  TORCH_CHECK(num_samples >= 0, "syncfree.", op, ": num_samples must be >= 0, got ",
              num_samples);
  const c10::SymInt rows = num_rows(labels);
  const c10::optional<int64_t> known_rows = rows.maybe_as_int();
  if (num_samples == 0 || !known_rows.has_value()) return;
  const int64_t max = std::numeric_limits<int64_t>::max();
  TORCH_CHECK(*known_rows <= max / num_samples, "syncfree.", op, ": the output would have ",
              *known_rows, " x ", num_samples, " elements, more than int64 can index");
  TORCH_CHECK(*known_rows * num_samples <= max / kSlotBytes, "syncfree.", op,
              ": num_samples = ", num_samples, " needs more than ", max,
              " bytes for the outputs (indices int64 and valid bool, ", *known_rows, " x ",
              num_samples, " elements each)");
}

void check_seed_or_generator(const char* op, const c10::optional<int64_t>& seed,
                             const c10::optional<at::Generator>& generator) {
  TORCH_CHECK(!(seed.has_value() && generator.has_value() && generator->defined()),
              "syncfree.", op, ": seed and generator are mutually exclusive, got both");
}

void check_generator_device(const char* op, const c10::optional<at::Generator>& generator,
                            const at::Device& device) {
  if (!generator.has_value() || !generator->defined()) return;
  const at::Device gen_device = generator->device();
  const bool same = gen_device.type() == device.type() &&
                    (device.type() == at::kCPU || gen_device.index() == device.index());
  TORCH_CHECK(same, "syncfree.", op, ": generator must be on the labels' device ", device,
              ", got a generator on ", gen_device);
}

c10::SymInt num_rows(const at::Tensor& labels) {
  c10::SymInt rows = 1;
  for (int64_t d = 0; d + 1 < labels.dim(); ++d) rows *= labels.sym_size(d);
  return rows;
}

std::vector<c10::SymInt> output_sizes(const at::Tensor& labels, const c10::SymInt& num_samples) {
  std::vector<c10::SymInt> sizes(labels.sym_sizes().begin(), labels.sym_sizes().end());
  sizes.back() = num_samples;
  return sizes;
}

c10::SymInt feature_width(const at::Tensor& features, int64_t label_dim) {
  c10::SymInt width = 1;
  for (int64_t d = label_dim; d < features.dim(); ++d) width *= features.sym_size(d);
  return width;
}

std::vector<c10::SymInt> sampled_feature_sizes(const at::Tensor& features,
                                               const at::Tensor& labels, const c10::SymInt& k) {
  const auto f = features.sym_sizes();
  std::vector<c10::SymInt> sizes(f.begin(), f.end());
  sizes[static_cast<size_t>(labels.dim() - 1)] = k;
  return sizes;
}

namespace {

std::string first_line(const char* text) {
  std::string s(text);
  const size_t end = s.find('\n');
  return end == std::string::npos ? s : s.substr(0, end);
}

[[noreturn]] void fail_allocation(const char* op, const std::string& subject,
                                  const std::string& bytes, const std::string& what,
                                  const at::Device& device, const std::string& reason) {
  TORCH_CHECK_WITH(OutOfMemoryError, false, "syncfree.", op, ": ", subject, " needs ", bytes,
                   " bytes for ", what, " on ", device,
                   ", more than could be allocated (", reason, ")");
}

// Bytes of a tensor of `sizes` and `element` bytes per element, as text
// ("more than 2^63 - 1" when that overflows; sizes are concrete here).
std::string byte_count(at::IntArrayRef sizes, int64_t element) {
  int64_t bytes = element;
  for (const int64_t s : sizes) {
    if (s != 0 && bytes > std::numeric_limits<int64_t>::max() / s) {
      return "more than " + std::to_string(std::numeric_limits<int64_t>::max());
    }
    bytes *= s;
  }
  return std::to_string(bytes);
}

}  // namespace

at::Tensor allocate(const char* op, Subject subject, const char* what,
                    at::SymIntArrayRef sizes, const at::TensorOptions& options) {
  try {
    return at::empty_symint(sizes, options);
  } catch (const c10::Error& e) {
    // What allocators raise: a plain c10::Error (the CPU allocator) or an
    // OutOfMemoryError. Other kinds (a CUDA error that surfaces here, say)
    // are not about memory: they pass unchanged.
    if (typeid(e) != typeid(c10::Error) &&
        dynamic_cast<const c10::OutOfMemoryError*>(&e) == nullptr) {
      throw;
    }
    const auto concrete = c10::asIntArrayRefSlowOpt(sizes);
    const std::string bytes =
        concrete.has_value()
            ? byte_count(*concrete, static_cast<int64_t>(c10::elementSize(
                                        c10::typeMetaToScalarType(options.dtype()))))
            : std::string("an unknown number of");
    fail_allocation(op, subject(), bytes, what, options.device(),
                    first_line(e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    fail_allocation(op, subject(), "too many", what, options.device(), e.what());
  }
}

at::Tensor allocate_workspace(const char* op, Subject subject, size_t bytes,
                              const at::Tensor& like) {
  TORCH_CHECK_WITH(OutOfMemoryError,
                   bytes <= static_cast<size_t>(std::numeric_limits<int64_t>::max()), "syncfree.",
                   op, ": ", subject(), " needs ", bytes,
                   " bytes for its workspace, more than int64 can count");
  const std::vector<c10::SymInt> sizes{c10::SymInt(static_cast<int64_t>(bytes))};
  return allocate(op, subject, "its workspace", sizes, like.options().dtype(at::kByte));
}

std::string shape_subject(const char* name, const at::Tensor& t) {
  std::ostringstream s;
  s << name << " of shape " << t.sym_sizes();
  return s.str();
}

std::tuple<at::Tensor, at::Tensor> empty_sample_outputs(const char* op, const at::Tensor& labels,
                                                        int64_t num_samples) {
  const auto sizes = output_sizes(labels, num_samples);
  // One message for the pair: the bytes of both outputs (check_num_samples
  // made sure that they fit in int64).
  try {
    return {at::empty_symint(sizes, labels.options().dtype(at::kLong)),
            at::empty_symint(sizes, labels.options().dtype(at::kBool))};
  } catch (const c10::Error& e) {
    const c10::optional<int64_t> rows = num_rows(labels).maybe_as_int();
    const std::string bytes =
        rows.has_value() ? std::to_string(*rows * num_samples * kSlotBytes) : "an unknown number of";
    fail_allocation(op, "num_samples = " + std::to_string(num_samples), bytes,
                    "the outputs (indices int64 and valid bool, " +
                        std::to_string(rows.value_or(-1)) + " x " + std::to_string(num_samples) +
                        " elements each)",
                    labels.device(), first_line(e.what_without_backtrace()));
  } catch (const std::bad_alloc& e) {
    fail_allocation(op, "num_samples = " + std::to_string(num_samples), "too many",
                    "the outputs", labels.device(), e.what());
  }
}

}  // namespace ops
}  // namespace syncfree

// The library's one TORCH_LIBRARY block. Each op defines its own schemas in
// its file (csrc/ops/<op>.cpp) with TORCH_LIBRARY_FRAGMENT.
TORCH_LIBRARY(syncfree, m) {}
