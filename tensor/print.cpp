// operator<< for tensors: PyTorch's layout of values (summarised past 1000 elements, the
// first and last 3 of each long dim), then shape, dtype and device.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr {

namespace {

constexpr std::int64_t summarise_above = 1000;
constexpr std::int64_t edge = 3;

struct Formatter {
  DType dtype;
  enum class Style { integer, whole_float, fixed, scientific } style = Style::fixed;
  std::size_t width = 1;
  // i64 values as read (an f64 holds integers exactly only up to 2^53): text_at prints these.
  const std::vector<std::int64_t>* ints = nullptr;

  // Element `i` of the values read back.
  std::string text_at(const std::vector<double>& values, std::int64_t i) const {
    if (ints) return std::to_string((*ints)[static_cast<std::size_t>(i)]);
    return text(values[static_cast<std::size_t>(i)]);
  }

  std::string text(double v) const {
    char buf[64];
    if (dtype == DType::boolean) return v != 0 ? "true" : "false";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (style) {
      case Style::integer: std::snprintf(buf, sizeof buf, "%.0f", v); break;
      case Style::whole_float: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Style::fixed: std::snprintf(buf, sizeof buf, "%.4f", v); break;
      case Style::scientific: std::snprintf(buf, sizeof buf, "%.4e", v); break;
    }
    return buf;
  }
};

// Row-major indices that are shown: all, or the first/last `edge` of every long dim.
void shown(const Shape& sizes, bool summarise, std::size_t d, std::int64_t base, std::vector<std::int64_t>& out) {
  if (d == sizes.size()) {
    out.push_back(base);
    return;
  }
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < sizes.size(); ++k) inner *= sizes[k];
  for (std::int64_t i = 0; i < sizes[d]; ++i) {
    if (summarise && sizes[d] > 2 * edge && i == edge) i = sizes[d] - edge;
    shown(sizes, summarise, d + 1, base + i * inner, out);
  }
}

void print_dim(std::ostream& os, const Shape& sizes, bool summarise, const std::vector<double>& values,
               std::size_t d, std::int64_t base, const Formatter& f, int indent) {
  if (d == sizes.size()) {
    std::string s = f.text_at(values, base);
    os << std::string(f.width - std::min(f.width, s.size()), ' ') << s;
    return;
  }
  std::int64_t inner = 1;
  for (std::size_t k = d + 1; k < sizes.size(); ++k) inner *= sizes[k];
  os << '[';
  bool last_dim = d + 1 == sizes.size();
  for (std::int64_t i = 0; i < sizes[d]; ++i) {
    if (i > 0) {
      os << ',';
      if (last_dim) os << ' ';
      else os << std::string(sizes.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
    }
    if (summarise && sizes[d] > 2 * edge && i == edge) {
      os << "...";
      os << ',';
      if (last_dim) os << ' ';
      else os << std::string(sizes.size() - d - 1, '\n') << std::string(indent + d + 1, ' ');
      i = sizes[d] - edge;
    }
    print_dim(os, sizes, summarise, values, d + 1, base + i * inner, f, indent);
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  // Read everything back once: as f64 on the host (exact for every dtype but i64 past 2^53),
  // i64 as itself. The conversion runs on the current stream: first ordered after
  // the streams that wrote t.
  if (t.device().is_cuda()) backend::order_after_writers(t.storage(), backend::current_stream(t.device().index()));
  std::vector<std::int64_t> ints;
  std::vector<double> values;
  if (t.dtype() == DType::i64) {
    ints = t.to(Device::cpu()).to_host<std::int64_t>();
    values.assign(ints.begin(), ints.end());  // the style and widths; the digits come from ints
  } else {
    values = t.to(DType::f64).to(Device::cpu()).to_host<double>();
  }
  const Shape& sizes = t.shape();
  bool summarise = t.numel() > summarise_above;

  Formatter f{t.dtype()};
  if (t.dtype() == DType::i64) f.ints = &ints;
  std::vector<std::int64_t> idx;
  shown(sizes, summarise, 0, 0, idx);
  if (!is_floating_point(t.dtype())) {
    f.style = Formatter::Style::integer;
  } else {
    bool whole = true;
    double max_abs = 0, min_abs = INFINITY;
    for (std::int64_t i : idx) {
      double v = values[static_cast<std::size_t>(i)];
      if (!std::isfinite(v)) continue;
      whole = whole && v == std::nearbyint(v);
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
    }
    if (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY && !whole))
      f.style = Formatter::Style::scientific;
    else if (whole)
      f.style = Formatter::Style::whole_float;
  }
  for (std::int64_t i : idx) f.width = std::max(f.width, f.text_at(values, i).size());

  os << "tensor(";
  if (sizes.empty()) os << f.text_at(values, 0);
  else print_dim(os, sizes, summarise, values, 0, 0, f, 7);
  os << ", shape=" << to_string(sizes) << ", dtype=" << to_string(t.dtype()) << ", device=" << t.device().str();
  if (t.requires_grad()) os << ", requires_grad=true";
  return os << ')';
}

}  // namespace brrr
