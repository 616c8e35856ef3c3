#include "nn/shape_ops.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

namespace escpod::nn::detail {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

Shape strides_of(const Shape& s) {
  Shape st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

int64_t norm_axis(int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  return (axis < 0 || axis >= rank) ? -1 : axis;
}

Status transpose_geometry(const Shape& in, std::vector<int64_t> perm, Shape& out, Shape& src_strides) {
  const int64_t rank = static_cast<int64_t>(in.size());
  if (perm.empty()) {
    for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int64_t>(perm.size()) != rank) {
    return Status::invalid_argument(fmt::format("perm has {} entries for a rank-{} tensor", perm.size(), rank));
  }
  const Shape st = strides_of(in);
  out.assign(perm.size(), 0);
  src_strides.assign(perm.size(), 0);
  std::vector<bool> seen(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    const int64_t p = norm_axis(perm[i], rank);
    if (p < 0 || seen[static_cast<size_t>(p)]) return Status::invalid_argument("perm is not a permutation");
    seen[static_cast<size_t>(p)] = true;
    out[i] = in[static_cast<size_t>(p)];
    src_strides[i] = st[static_cast<size_t>(p)];
  }
  return Status::ok();
}

Status slice_geometry(const Shape& in, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                      const std::vector<int64_t>& axes_in, const std::vector<int64_t>& steps_in,
                      Shape& out, Shape& src_strides, int64_t& src_start, bool& is_axis0_reverse) {
  const int64_t rank = static_cast<int64_t>(in.size());
  if (starts.size() != ends.size()) return Status::invalid_argument("starts and ends differ in length");
  std::vector<int64_t> axes = axes_in;
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  std::vector<int64_t> steps = steps_in;
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) {
    return Status::invalid_argument("axes/steps differ in length from starts");
  }
  const Shape st = strides_of(in);
  out = in;
  src_strides = st;
  src_start = 0;
  std::vector<bool> sliced(in.size(), false);
  is_axis0_reverse = false;
  bool other_change = false;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = norm_axis(axes[i], rank);
    if (a < 0 || sliced[static_cast<size_t>(a)]) return Status::invalid_argument("bad or repeated slice axis");
    sliced[static_cast<size_t>(a)] = true;
    const int64_t dim = in[static_cast<size_t>(a)];
    const int64_t step = steps[i];
    if (step == 0) return Status::invalid_argument("slice step 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += dim;
    if (e < 0 && e != std::numeric_limits<int64_t>::min()) e += dim;
    if (e == std::numeric_limits<int64_t>::min()) e = -1;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    out[static_cast<size_t>(a)] = len;
    src_strides[static_cast<size_t>(a)] = st[static_cast<size_t>(a)] * step;
    src_start += (len > 0 ? s : 0) * st[static_cast<size_t>(a)];
    const bool full_reverse = step == -1 && len == dim && s == dim - 1;
    const bool identity = step == 1 && len == dim;
    if (a == 0 && full_reverse) {
      is_axis0_reverse = true;
    } else if (!identity) {
      other_change = true;
    }
  }
  if (other_change) is_axis0_reverse = false;
  return Status::ok();
}

Result<Shape> reshape_shape(const Shape& in, const std::vector<int64_t>& target, bool allow_zero) {
  Shape out(target.size());
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allow_zero) {
      if (i >= in.size()) return Status::invalid_argument("reshape 0 beyond the input rank");
      d = in[i];
    }
    if (d == -1) {
      if (infer >= 0) return Status::invalid_argument("reshape with two -1");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (d < 0) return Status::invalid_argument("negative reshape dimension");
    out[i] = d;
    known *= d;
  }
  const int64_t total = numel(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0) {
      return Status::invalid_argument(fmt::format("cannot reshape {} to {}", shape_str(in), shape_str(target)));
    }
    out[static_cast<size_t>(infer)] = total / known;
  } else if (known != total) {
    return Status::invalid_argument(fmt::format("cannot reshape {} to {}", shape_str(in), shape_str(target)));
  }
  return out;
}

Result<Shape> squeeze_shape(const Shape& in, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> drop(in.size(), false);
  if (axes.empty()) {
    for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
  }
  for (int64_t a : axes) {
    const int64_t n = norm_axis(a, rank);
    if (n < 0 || in[static_cast<size_t>(n)] != 1) {
      return Status::invalid_argument(fmt::format("cannot squeeze axis {} of {}", a, shape_str(in)));
    }
    drop[static_cast<size_t>(n)] = true;
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!drop[d]) out.push_back(in[d]);
  }
  return out;
}

Result<Shape> unsqueeze_shape(const Shape& in, const std::vector<int64_t>& axes) {
  const int64_t rank = static_cast<int64_t>(in.size() + axes.size());
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    const int64_t n = norm_axis(a, rank);
    if (n < 0 || added[static_cast<size_t>(n)]) return Status::invalid_argument("bad unsqueeze axes");
    added[static_cast<size_t>(n)] = true;
  }
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < rank; ++d) out.push_back(added[static_cast<size_t>(d)] ? 1 : in[k++]);
  return out;
}

Shape expand_rank(const Shape& s, size_t rank) {
  Shape out(rank - std::min(rank, s.size()), 1);
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

Result<Shape> broadcast_shape(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  const Shape ea = expand_rank(a, rank), eb = expand_rank(b, rank);
  Shape out(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (ea[d] == eb[d] || eb[d] == 1) {
      out[d] = ea[d];
    } else if (ea[d] == 1) {
      out[d] = eb[d];
    } else {
      return Status::invalid_argument(fmt::format("shapes {} and {} do not broadcast", shape_str(a), shape_str(b)));
    }
  }
  return out;
}

}  // namespace escpod::nn::detail
