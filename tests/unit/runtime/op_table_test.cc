// The op table (runtime/op_registry.h, runtime/builtin_ops.cc) as a whole: every
// registration is complete and well formed, and OpRegistry::Plan enforces what the table
// states (attribute types, required attributes, input dtypes, scalars) before a planner runs.
// What each op computes is the planners' test (op_registry_test.cc) and the conformance
// test's (tests/python/test_op_conformance.py).
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/base/status_macros.h"
#include "runtime/cpu/cpu_device.h"
#include "runtime/op_registry.h"
#include "tests/testing/status_matchers.h"

namespace gpukit {
namespace {

using ::gpukit::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::vector<OpDef>& Ops() { return OpRegistry::Builtin().ops(); }

// A value of each attribute type, and one of another type.
AttrValue ValueOf(AttrType type) {
  switch (type) {
    case AttrType::kInt:
      return int64_t{1};
    case AttrType::kNumber:
      return 1.5;
    case AttrType::kBool:
      return true;
    case AttrType::kDType:
      return DType::kFloat32;
    case AttrType::kIntList:
      return std::vector<int64_t>{1};
    case AttrType::kString:
      return std::string("s");
    case AttrType::kAxes:
      return std::vector<int64_t>{0, 1};
  }
  return int64_t{0};
}
AttrValue NotOf(AttrType type) {
  return type == AttrType::kString ? AttrValue(true) : AttrValue(std::string("wrong"));
}

// Array operands of the first dtype each input accepts, rank 2.
std::vector<OperandDesc> Operands(const OpDef& op, int count) {
  std::vector<OperandDesc> operands(count);
  for (int i = 0; i < count; ++i) operands[i].tensor = {op.input(i).dtypes.front(), {2, 2}};
  return operands;
}

TEST(OpTableTest, NamesAreUniqueAndFindableAndTestOnlyOpsArePrefixed) {
  std::set<std::string> names;
  for (const OpDef& op : Ops()) {
    EXPECT_TRUE(names.insert(op.name).second) << "registered twice: " << op.name;
    absl::StatusOr<const OpDef*> found = OpRegistry::Builtin().Find(op.name);
    ASSERT_TRUE(found.ok()) << op.name;
    EXPECT_EQ(*found, &op);
    EXPECT_FALSE(op.name.empty());
  }
  EXPECT_THAT(OpRegistry::Builtin().Find("frobnicate"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown op")));
}

TEST(OpTableTest, EveryOpHasASummaryInputsAPlannerAndACpuKernel) {
  for (const OpDef& op : Ops()) {
    SCOPED_TRACE(op.name);
    EXPECT_FALSE(op.summary.empty());
    EXPECT_NE(op.summary.back(), '\n');
    EXPECT_GE(op.min_inputs, 1);
    EXPECT_LE(op.min_inputs, op.max_inputs);
    ASSERT_FALSE(op.inputs.empty());
    // One spec per position, or fewer for a variadic op whose last spec stands for the rest.
    EXPECT_LE(static_cast<int>(op.inputs.size()), op.max_inputs);
    for (const InputSpec& input : op.inputs) {
      EXPECT_FALSE(input.name.empty());
      EXPECT_FALSE(input.dtypes.empty()) << input.name;
      std::set<DType> unique(input.dtypes.begin(), input.dtypes.end());
      EXPECT_EQ(unique.size(), input.dtypes.size()) << input.name << " repeats a dtype";
    }
    EXPECT_NE(op.plan, nullptr);
    EXPECT_NE(op.cpu, nullptr);
    if (IsTestOnlyOp(op.name)) {
      EXPECT_EQ(op.cuda, nullptr) << "test-only ops run on the CPU backend only";
      EXPECT_EQ(op.cuda_library, CudaLibrary::kNone);
    } else {
      EXPECT_FALSE(op.cpu_on_stream_thread) << "only work that never returns needs it";
    }
  }
}

TEST(OpTableTest, OnlyMatmulIsOfferedToCublasLt) {
  for (const OpDef& op : Ops()) {
    EXPECT_EQ(op.cuda_library == CudaLibrary::kCublasLtMatmul, op.name == "matmul") << op.name;
  }
}

TEST(OpTableTest, AttrSpecsAreWellFormed) {
  for (const OpDef& op : Ops()) {
    std::set<std::string> names;
    for (const AttrSpec& attr : op.attrs) {
      SCOPED_TRACE(op.name + "." + attr.name);
      EXPECT_TRUE(names.insert(attr.name).second) << "declared twice";
      EXPECT_FALSE(attr.name.empty());
      EXPECT_FALSE(attr.doc.empty());
      EXPECT_EQ(attr.doc.find('\n'), std::string::npos) << "one line";
      // A required attribute has no default; an optional one says what its absence means.
      EXPECT_EQ(attr.required, attr.default_value.empty());
      EXPECT_EQ(op.FindAttr(attr.name), &attr);
      EXPECT_TRUE(AttrHasType(ValueOf(attr.type), attr.type));
      EXPECT_FALSE(AttrHasType(NotOf(attr.type), attr.type));
    }
    EXPECT_EQ(op.FindAttr("frobnicate"), nullptr);
  }
}

TEST(OpTableTest, AnAttributeOfTheWrongTypeIsRefusedNamingItBeforeThePlannerRuns) {
  int checked = 0;
  for (const OpDef& op : Ops()) {
    for (const AttrSpec& attr : op.attrs) {
      SCOPED_TRACE(op.name + "." + attr.name);
      AttrMap attrs = {{attr.name, NotOf(attr.type)}};
      EXPECT_THAT(OpRegistry::Builtin().Plan(op, Operands(op, op.min_inputs), attrs),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           AllOf(HasSubstr("attribute \"" + attr.name + "\" must be " +
                                           std::string(AttrTypeName(attr.type))),
                                 HasSubstr("op \"" + op.name + "\""))));
      ++checked;
    }
  }
  EXPECT_GT(checked, 10);
}

TEST(OpTableTest, ANumberAttributeTakesAnIntegerOrAFloat) {
  const OpRegistry& registry = OpRegistry::Builtin();
  GPUKIT_ASSERT_OK_AND_ASSIGN(const OpDef* rmsnorm, registry.Find("rmsnorm"));
  ASSERT_NE(rmsnorm->FindAttr("eps"), nullptr);
  EXPECT_EQ(rmsnorm->FindAttr("eps")->type, AttrType::kNumber);
  for (AttrValue eps : {AttrValue(int64_t{0}), AttrValue(1e-3)}) {
    GPUKIT_ASSERT_OK_AND_ASSIGN(OpPlan plan,
                                registry.Plan(*rmsnorm, Operands(*rmsnorm, 1), {{"eps", eps}}));
    EXPECT_EQ(plan.params.eps, std::holds_alternative<double>(eps) ? 1e-3 : 0.0);
  }
}

TEST(OpTableTest, ARequiredAttributeIsRefusedWhenMissing) {
  int checked = 0;
  for (const OpDef& op : Ops()) {
    for (const AttrSpec& attr : op.attrs) {
      if (!attr.required) continue;
      EXPECT_THAT(OpRegistry::Builtin().Plan(op, Operands(op, op.min_inputs), {}),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("needs attribute \"" + attr.name + "\"")))
          << op.name;
      ++checked;
    }
  }
  EXPECT_GE(checked, 2);  // astype's dtype, reshape's shape
}

TEST(OpTableTest, AnInputDtypeTheTableDoesNotListIsRefusedNamingTheInput) {
  int checked = 0;
  for (const OpDef& op : Ops()) {
    for (int i = 0; i < op.min_inputs; ++i) {
      const InputSpec& input = op.input(i);
      for (DType dtype : kAllDTypes) {
        if (std::find(input.dtypes.begin(), input.dtypes.end(), dtype) != input.dtypes.end()) {
          continue;
        }
        std::vector<OperandDesc> operands = Operands(op, op.min_inputs);
        operands[i].tensor.dtype = dtype;
        EXPECT_THAT(OpRegistry::Builtin().Plan(op, operands, {}),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr(absl::StrCat("inputs[", i, "] (", input.name, ")"))))
            << op.name << " " << DTypeName(dtype);
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 4);  // embedding's indices: not float32, float16, bfloat16 or uint8
}

TEST(OpTableTest, AScalarIsRefusedWhereTheTableSaysArray) {
  for (const OpDef& op : Ops()) {
    for (int i = 0; i < op.min_inputs; ++i) {
      if (op.input(i).scalar_ok) continue;
      std::vector<OperandDesc> operands = Operands(op, op.min_inputs);
      operands[i] = OperandDesc{};
      operands[i].is_scalar = true;
      EXPECT_THAT(OpRegistry::Builtin().Plan(op, operands, {}),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr(absl::StrCat("inputs[", i, "] of \"", op.name,
                                                  "\" must be an array, not a scalar"))));
    }
  }
}

TEST(OpTableTest, TheCpuDeviceSupportsExactlyTheOpsWithACpuKernel) {
  GPUKIT_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CpuDevice> device, CpuDevice::Create({}));
  for (const OpDef& op : Ops()) {
    EXPECT_EQ(device->SupportsOp(op.name), op.cpu != nullptr) << op.name;
  }
}

}  // namespace
}  // namespace gpukit
