#include "runtime/base/matmul_shapes.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpukit {

absl::StatusOr<MatmulMatrices> AsMatmulMatrices(absl::Span<const int64_t> a,
                                                absl::Span<const int64_t> b) {
  for (const auto& [i, shape] : {std::pair{0, a}, std::pair{1, b}}) {
    if (shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("matmul: Input operand ", i,
                       " does not have enough dimensions (has 0, gufunc core with signature "
                       "(n?,k),(k,m?)->(n?,m?) requires 1)"));
    }
  }
  MatmulMatrices mm;
  mm.a.assign(a.begin(), a.end());
  mm.b.assign(b.begin(), b.end());
  mm.out_matrix_rank = (a.size() == 1 ? 0 : 1) + (b.size() == 1 ? 0 : 1);
  if (a.size() == 1) mm.a.insert(mm.a.begin(), 1);
  if (b.size() == 1) mm.b.push_back(1);
  const int64_t k = mm.a.back(), kb = mm.b[mm.b.size() - 2];
  if (k != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul inner dimensions differ: inputs[0] ", ShapeToString(a), " has ", k,
                     " columns, inputs[1] ", ShapeToString(b), " has ", kb, " rows"));
  }
  return mm;
}

}  // namespace gpukit
