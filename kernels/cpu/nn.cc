// ArgmaxCpu, SoftmaxCpu, LayerNormCpu, RmsNormCpu, RopeCpu and AttentionCpu.
//
// The floating kernels widen every element to double, compute in double, and round each
// result once (ConvertTo); they are the references the float32 device kernels are held to.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dispatch.h"

namespace gpukit::kernels {
namespace {

using internal::ConvertTo;
using internal::DispatchDType;
using internal::NumElements;
using internal::Widen;

// A tensor seen as [outer][extent][inner] around one axis.
struct Geometry {
  int64_t outer;
  int64_t extent;
  int64_t inner;
};

Geometry AroundAxis(const Shape& shape, int axis) {
  const auto dims = absl::MakeConstSpan(shape);
  return {NumElements(dims.subspan(0, axis)), shape[axis], NumElements(dims.subspan(axis + 1))};
}

// Reads a floating array of any floating dtype as doubles.
std::vector<double> ToDoubles(const ConstHostArray& a) {
  std::vector<double> values(static_cast<size_t>(NumElements(a.shape)));
  DispatchDType(a.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = static_cast<const T*>(a.data);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(Widen(data[i]));
  });
  return values;
}

// Stores doubles into a floating array, one rounding each.
void FromDoubles(const std::vector<double>& values, const HostArray& out) {
  DispatchDType(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = static_cast<T*>(out.data);
    for (size_t i = 0; i < values.size(); ++i) data[i] = ConvertTo<T>(values[i]);
  });
}

template <typename W>
bool IsNan(W value) {
  if constexpr (std::is_floating_point_v<W>) {
    return std::isnan(value);
  } else {
    return false;
  }
}

}  // namespace

void ArgmaxCpu(const ConstHostArray& in, std::optional<int> axis, const HostArray& out) {
  const Geometry g =
      axis.has_value() ? AroundAxis(in.shape, *axis) : Geometry{1, NumElements(in.shape), 1};
  int64_t* result = static_cast<int64_t*>(out.data);
  DispatchDType(in.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* data = static_cast<const T*>(in.data);
    for (int64_t o = 0; o < g.outer; ++o) {
      for (int64_t i = 0; i < g.inner; ++i) {
        const T* lane = data + o * g.extent * g.inner + i;
        auto best = Widen(lane[0]);
        int64_t best_index = 0;
        for (int64_t k = 1; k < g.extent && !IsNan(best); ++k) {
          const auto v = Widen(lane[k * g.inner]);
          if (v > best || IsNan(v)) {
            best = v;
            best_index = k;
          }
        }
        result[o * g.inner + i] = best_index;
      }
    }
  });
}

void SoftmaxCpu(const ConstHostArray& in, int axis, const HostArray& out) {
  const Geometry g = AroundAxis(in.shape, axis);
  std::vector<double> x = ToDoubles(in);
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t i = 0; i < g.inner; ++i) {
      double* lane = x.data() + o * g.extent * g.inner + i;
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < g.extent; ++k) {
        const double v = lane[k * g.inner];
        if (v > max || std::isnan(v)) max = v;
        if (std::isnan(max)) break;
      }
      double sum = 0;
      for (int64_t k = 0; k < g.extent; ++k) {
        lane[k * g.inner] = std::exp(lane[k * g.inner] - max);
        sum += lane[k * g.inner];
      }
      for (int64_t k = 0; k < g.extent; ++k) lane[k * g.inner] /= sum;
    }
  }
  FromDoubles(x, out);
}

void LayerNormCpu(const ConstHostArray& x, const ConstHostArray* weight, const ConstHostArray* bias,
                  double eps, const HostArray& out) {
  const int64_t dim = x.shape.back();
  std::vector<double> values = ToDoubles(x);
  const std::vector<double> w = weight ? ToDoubles(*weight) : std::vector<double>();
  const std::vector<double> b = bias ? ToDoubles(*bias) : std::vector<double>();
  const int64_t rows = dim == 0 ? 0 : static_cast<int64_t>(values.size()) / dim;
  for (int64_t r = 0; r < rows; ++r) {
    double* row = values.data() + r * dim;
    double mean = 0;
    for (int64_t j = 0; j < dim; ++j) mean += row[j];
    mean /= static_cast<double>(dim);
    double var = 0;
    for (int64_t j = 0; j < dim; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(dim);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < dim; ++j) {
      double y = (row[j] - mean) * inv;
      if (weight) y *= w[j];
      if (bias) y += b[j];
      row[j] = y;
    }
  }
  FromDoubles(values, out);
}

void RmsNormCpu(const ConstHostArray& x, const ConstHostArray* weight, double eps,
                const HostArray& out) {
  const int64_t dim = x.shape.back();
  std::vector<double> values = ToDoubles(x);
  const std::vector<double> w = weight ? ToDoubles(*weight) : std::vector<double>();
  const int64_t rows = dim == 0 ? 0 : static_cast<int64_t>(values.size()) / dim;
  for (int64_t r = 0; r < rows; ++r) {
    double* row = values.data() + r * dim;
    double squares = 0;
    for (int64_t j = 0; j < dim; ++j) squares += row[j] * row[j];
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) row[j] = row[j] * inv * (weight ? w[j] : 1.0);
  }
  FromDoubles(values, out);
}

void RopeCpu(const ConstHostArray& x, double base, int64_t offset, const HostArray& out) {
  const int64_t dim = x.shape.back();
  const int64_t seq = x.shape[x.shape.size() - 2];
  const int64_t half = dim / 2;
  std::vector<double> values = ToDoubles(x);
  const int64_t rows = dim == 0 ? 0 : static_cast<int64_t>(values.size()) / dim;
  for (int64_t r = 0; r < rows; ++r) {
    double* row = values.data() + r * dim;
    const double position = static_cast<double>(offset + r % seq);
    for (int64_t i = 0; i < half; ++i) {
      const double theta =
          position * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
      const double c = std::cos(theta), s = std::sin(theta);
      const double x1 = row[i], x2 = row[i + half];
      row[i] = x1 * c - x2 * s;
      row[i + half] = x2 * c + x1 * s;
    }
  }
  FromDoubles(values, out);
}

void AttentionCpu(const ConstHostArray& q, const ConstHostArray& k, const ConstHostArray& v,
                  bool causal, double scale, const HostArray& out) {
  const int64_t heads = q.shape[0], sq = q.shape[1], d = q.shape[2];
  const int64_t sk = k.shape[1], dv = v.shape[2];
  const std::vector<double> qd = ToDoubles(q), kd = ToDoubles(k), vd = ToDoubles(v);
  std::vector<double> result(static_cast<size_t>(heads * sq * dv), 0.0);
  std::vector<double> scores(static_cast<size_t>(sk));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < sq; ++i) {
      int64_t visible = sk;
      if (causal) visible = std::clamp<int64_t>(i + sk - sq + 1, 0, sk);
      if (visible == 0) continue;  // zeros
      const double* qrow = qd.data() + (h * sq + i) * d;
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        const double* krow = kd.data() + (h * sk + j) * d;
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += qrow[e] * krow[e];
        scores[j] = dot * scale;
        if (scores[j] > max || std::isnan(scores[j])) max = std::isnan(max) ? max : scores[j];
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores[j] = std::exp(scores[j] - max);
        sum += scores[j];
      }
      double* orow = result.data() + (h * sq + i) * dv;
      for (int64_t j = 0; j < visible; ++j) {
        const double p = scores[j] / sum;
        const double* vrow = vd.data() + (h * sk + j) * dv;
        for (int64_t e = 0; e < dv; ++e) orow[e] += p * vrow[e];
      }
    }
  }
  FromDoubles(result, out);
}

}  // namespace gpukit::kernels
