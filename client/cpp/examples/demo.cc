// The quick-start demo: upload two arrays, add and multiply them, print the results.
//
//   gpukit_demo [--addr ADDR]
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "gpukit/client.h"

namespace {

int Fail(const char* what, const absl::Status& status) {
  std::cerr << "gpukit_demo: " << what << ": " << status << "\n";
  return 1;
}

std::string Format(const std::vector<float>& values, int64_t columns) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i % columns == 0)
      out += i == 0 ? "[" : "], [";
    else
      out += ", ";
    std::string number = std::to_string(values[i]);
    number.erase(number.find_last_not_of('0') + 1);
    if (number.back() == '.') number.pop_back();
    out += number;
  }
  return out + "]]";
}

}  // namespace

int main(int argc, char** argv) {
  gpukit::ClientOptions options;
  // options.tenant stays empty: the session acts for the caller's own tenant.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--addr") == 0 && i + 1 < argc) options.address = argv[++i];
  }
  auto client = gpukit::Client::Connect(options);
  if (!client.ok()) return Fail("connect", client.status());
  std::cout << "connected to " << (*client)->address() << ", session " << (*client)->session_id()
            << "\n";

  auto a = (*client)->FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  if (!a.ok()) return Fail("upload a", a.status());
  auto b = (*client)->FromVector<float>({10, 20, 30}, {3});
  if (!b.ok()) return Fail("upload b", b.status());
  std::cout << "a       = [[1, 2, 3], [4, 5, 6]]  (2x3 float32)\n";
  std::cout << "b       = [10, 20, 30]            (3 float32, broadcast over rows)\n";

  auto sum = (*client)->Add(*a, *b);
  if (!sum.ok()) return Fail("add", sum.status());
  auto product = (*client)->Mul(*sum, *a);
  if (!product.ok()) return Fail("mul", product.status());
  auto total = (*client)->Sum(*product);
  if (!total.ok()) return Fail("sum", total.status());

  auto sum_values = sum->ToVector<float>();
  auto product_values = product->ToVector<float>();
  auto total_values = total->ToVector<float>();
  if (!sum_values.ok()) return Fail("download", sum_values.status());
  if (!product_values.ok()) return Fail("download", product_values.status());
  if (!total_values.ok()) return Fail("download", total_values.status());
  std::cout << "a + b         = " << Format(*sum_values, 3) << "\n";
  std::cout << "(a + b) * a   = " << Format(*product_values, 3) << "\n";
  std::cout << "sum(...)      = " << (*total_values)[0] << "\n";
  return 0;
}
