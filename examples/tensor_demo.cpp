// A short tour of the tensor library: creation, views, printing, dispatch and errors.
#include <iostream>

#include "core/flow.h"

int main() {
  flow::manual_seed(0);
  auto x = flow::randn({1, 3});
  std::cout << "x = flow::randn({1, 3})\n" << x << "\n\n";

  auto a = flow::arange(6).reshape({2, 3});
  std::cout << "a = flow::arange(6).reshape({2, 3})\n" << a << "\n";
  std::cout << "a.t() shares storage: " << a.t() << ", contiguous: " << std::boolalpha << a.t().is_contiguous()
            << "\n\n";

  auto m = flow::linspace(0, 1, 5).to(flow::kFloat64);
  std::cout << "flow::linspace(0, 1, 5) as float64\n" << m << "\n\n";
  std::cout << "flow::eye(3)\n" << flow::eye(3) << "\n\n";

  try {
    flow::view(a.t(), {6});
  } catch (const flow::Error& e) {
    std::cout << "errors name the op: " << e.what() << "\n";
  }
  return 0;
}
