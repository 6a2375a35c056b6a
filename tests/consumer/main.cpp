// Samples 8 of 20 labels through the installed C++ API and checks the result.
#include <syncfree/syncfree.h>

#include <cstdio>
#include <set>

int main() {
  at::Tensor labels = at::tensor({1, 0, 1, 0, 0, 0, 1, 0, 0, 0, -1, 0, 1, 0, 0, 0, 0, 1, 0, 0},
                                 at::kLong);
  at::Tensor indices, valid;
  std::tie(indices, valid) =
      syncfree::balanced_sample(labels, 8, syncfree::SampleOptions().seed(2024));
  std::set<int64_t> seen;
  int positives = 0;
  for (int64_t s = 0; s < 8; ++s) {
    const int64_t i = indices[s].item<int64_t>();
    if (!valid[s].item<bool>() || i < 0 || i >= 20 || !seen.insert(i).second) {
      std::printf("consumer: bad sample at slot %lld\n", static_cast<long long>(s));
      return 1;
    }
    positives += labels[i].item<int64_t>() == 1;
  }
  if (positives != 4) {
    std::printf("consumer: expected 4 positives, got %d\n", positives);
    return 1;
  }
  std::printf("consumer: ok (%s)\n", indices.toString().c_str());
  return 0;
}
