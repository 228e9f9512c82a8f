// Every collective against a reference computed locally: each rank's input is a function of its
// rank, so every rank knows what all the others contribute.
#include <algorithm>
#include <numeric>

#include "distributed/rank_fixture.h"

namespace flow::distributed::testing {
namespace {

using Collectives = RankTest;

template <typename T>
T input_value(int64_t rank, int64_t i) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(rank * 1.5 - i * 0.25);
  return static_cast<T>((rank * 7 + i * 3) % 50 - (std::is_signed_v<T> ? 20 : 0));
}

template <typename T>
T reference_reduce(ReduceOp reduce, int64_t world, int64_t i) {
  T result = input_value<T>(0, i);
  for (int64_t r = 1; r < world; ++r) {
    T value = input_value<T>(r, i);
    switch (reduce) {
      case ReduceOp::kMax: result = std::max(result, value); break;
      case ReduceOp::kMin: result = std::min(result, value); break;
      case ReduceOp::kSum:
      case ReduceOp::kAvg: result = static_cast<T>(result + value); break;
    }
  }
  return reduce == ReduceOp::kAvg ? static_cast<T>(result / static_cast<T>(world)) : result;
}

template <typename T>
void check_all_reduce(ProcessGroup& group, int64_t rank, int64_t world, ReduceOp reduce, const Ranks& ranks = {}) {
  constexpr int64_t kCount = 37;
  std::vector<T> values(kCount);
  for (int64_t i = 0; i < kCount; ++i) values[i] = input_value<T>(rank, i);
  Tensor tensor = make_filled<T>({kCount}, values);
  group.all_reduce(tensor, reduce, ranks)->wait();
  std::vector<T> result = contents<T>(tensor);
  for (int64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(result[i], reference_reduce<T>(reduce, world, i))
        << dtype_name(DTypeOf<T>::value) << " " << reduce_op_name(reduce) << " element " << i;
  }
}

TEST_F(Collectives, AllReduceEveryReductionAndDtype) {
  for (ReduceOp reduce : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    check_all_reduce<float>(group(), rank, world, reduce);
    check_all_reduce<double>(group(), rank, world, reduce);
    check_all_reduce<int32_t>(group(), rank, world, reduce);
    check_all_reduce<int64_t>(group(), rank, world, reduce);
    check_all_reduce<int8_t>(group(), rank, world, reduce);
  }
}

TEST_F(Collectives, AllReduceHalfPrecision) {
  // Small integers are exact in float16 and bfloat16, so every summation order agrees.
  std::vector<float> values{1.0f * static_cast<float>(rank), 2.0f, -3.0f};
  Tensor half = make_filled<float>({3}, values).to(kFloat16);
  Tensor bfloat = make_filled<float>({3}, values).to(kBFloat16);
  group().all_reduce(half, ReduceOp::kSum, {})->wait();
  group().all_reduce(bfloat, ReduceOp::kSum, {})->wait();
  float rank_sum = static_cast<float>(world * (world - 1) / 2);
  std::vector<float> expected{rank_sum, 2.0f * world, -3.0f * world};
  EXPECT_EQ(half.to(kFloat32).tolist<float>(), expected);
  EXPECT_EQ(bfloat.to(kFloat32).tolist<float>(), expected);
}

TEST_F(Collectives, AllReduceRefusesBool) {
  Tensor flags = make_filled<bool>({2}, {true, false});
  EXPECT_THROW(group().all_reduce(flags, ReduceOp::kMax, {}), Error);
}

// Member r gathers (2r+1) % 3 rows of 3 elements: uneven, and some members send none.
int64_t gather_rows(int64_t r) { return (2 * r + 1) % 3; }

template <typename T>
void check_all_gather(ProcessGroup& group, int64_t rank, int64_t world) {
  constexpr int64_t kColumns = 3;
  std::vector<int64_t> sizes;
  for (int64_t r = 0; r < world; ++r) sizes.push_back(gather_rows(r));
  std::vector<T> mine;
  for (int64_t i = 0; i < sizes[rank] * kColumns; ++i) mine.push_back(input_value<T>(rank, i));
  Tensor input = make_filled<T>({sizes[rank], kColumns}, mine);
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  Tensor output = make_tensor({total, kColumns}, DTypeOf<T>::value, kCPU);
  group.all_gather(input, output, sizes, {})->wait();
  std::vector<T> expected;
  for (int64_t r = 0; r < world; ++r) {
    for (int64_t i = 0; i < sizes[r] * kColumns; ++i) expected.push_back(input_value<T>(r, i));
  }
  EXPECT_EQ(contents<T>(output), expected) << dtype_name(DTypeOf<T>::value);
}

TEST_F(Collectives, AllGatherUnevenEveryDtype) {
  check_all_gather<float>(group(), rank, world);
  check_all_gather<double>(group(), rank, world);
  check_all_gather<int32_t>(group(), rank, world);
  check_all_gather<int64_t>(group(), rank, world);
  check_all_gather<int8_t>(group(), rank, world);
  check_all_gather<uint8_t>(group(), rank, world);
}

TEST_F(Collectives, AllGatherBool) {
  Tensor input = make_filled<bool>({1}, {rank % 2 == 1});
  Tensor output = make_tensor({world}, kBool, kCPU);
  group().all_gather(input, output, std::vector<int64_t>(world, 1), {})->wait();
  std::vector<bool> gathered = contents<bool>(output);
  for (int64_t r = 0; r < world; ++r) EXPECT_EQ(gathered[r], r % 2 == 1);
}

TEST_F(Collectives, ReduceScatterUnevenEveryReduction) {
  constexpr int64_t kColumns = 2;
  std::vector<int64_t> sizes;
  for (int64_t r = 0; r < world; ++r) sizes.push_back(r + 1);
  int64_t rows = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  int64_t first_row = std::accumulate(sizes.begin(), sizes.begin() + rank, int64_t{0});
  for (ReduceOp reduce : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    std::vector<double> values;
    for (int64_t i = 0; i < rows * kColumns; ++i) values.push_back(input_value<double>(rank, i));
    Tensor input = make_filled<double>({rows, kColumns}, values);
    Tensor output = make_tensor({sizes[rank], kColumns}, kFloat64, kCPU);
    group().reduce_scatter(input, output, sizes, reduce, {})->wait();
    std::vector<double> expected;
    for (int64_t i = first_row * kColumns; i < (first_row + sizes[rank]) * kColumns; ++i) {
      expected.push_back(reference_reduce<double>(reduce, world, i));
    }
    EXPECT_EQ(contents<double>(output), expected) << reduce_op_name(reduce);
    EXPECT_EQ(contents<double>(input), values) << "the input is left as it was";
  }
}

TEST_F(Collectives, BroadcastFromEveryRoot) {
  for (int64_t root = 0; root < world; ++root) {
    Tensor numbers = make_filled<int64_t>({4}, {rank, rank * 2, rank * 3, -rank});
    group().broadcast(numbers, root, {})->wait();
    EXPECT_EQ(contents<int64_t>(numbers), (std::vector<int64_t>{root, root * 2, root * 3, -root}));
    Tensor flags = make_filled<bool>({2}, {rank == root, rank != root});
    group().broadcast(flags, root, {})->wait();
    EXPECT_EQ(contents<bool>(flags), (std::vector<bool>{true, false}));
  }
}

// Rank src sends (src + dst) % 3 rows to rank dst; each row holds 100 * src + 10 * dst + row.
int64_t exchange_rows(int64_t source, int64_t destination) { return (source + destination) % 3; }

TEST_F(Collectives, AllToAllUneven) {
  std::vector<int64_t> send_sizes;
  std::vector<int64_t> recv_sizes;
  std::vector<float> sent;
  std::vector<float> expected;
  for (int64_t peer = 0; peer < world; ++peer) {
    send_sizes.push_back(exchange_rows(rank, peer));
    recv_sizes.push_back(exchange_rows(peer, rank));
    for (int64_t row = 0; row < send_sizes.back(); ++row) {
      sent.insert(sent.end(), 2, static_cast<float>(100 * rank + 10 * peer + row));
    }
    for (int64_t row = 0; row < recv_sizes.back(); ++row) {
      expected.insert(expected.end(), 2, static_cast<float>(100 * peer + 10 * rank + row));
    }
  }
  Tensor input = make_filled<float>({static_cast<int64_t>(sent.size() / 2), 2}, sent);
  Tensor output = make_tensor({static_cast<int64_t>(expected.size() / 2), 2}, kFloat32, kCPU);
  group().all_to_all(input, send_sizes, output, recv_sizes, {})->wait();
  EXPECT_EQ(contents<float>(output), expected);
}

TEST_F(Collectives, SubGroupsOfEvenAndOddRanks) {
  Ranks same_parity;
  for (int64_t r = rank % 2; r < world; r += 2) same_parity.push_back(r);
  Tensor tensor = make_filled<int64_t>({2}, {rank, 1});
  group().all_reduce(tensor, ReduceOp::kSum, same_parity)->wait();
  int64_t rank_sum = std::accumulate(same_parity.begin(), same_parity.end(), int64_t{0});
  EXPECT_EQ(contents<int64_t>(tensor), (std::vector<int64_t>{rank_sum, static_cast<int64_t>(same_parity.size())}));
  // A second call reuses the cached communicator; the world still works beside it.
  Tensor root_value = make_filled<int64_t>({1}, {rank});
  group().broadcast(root_value, same_parity.back(), same_parity)->wait();
  EXPECT_EQ(contents<int64_t>(root_value)[0], same_parity.back());
  check_all_reduce<float>(group(), rank, world, ReduceOp::kSum);
}

TEST_F(Collectives, SendAndReceiveBothWaysAtOnce) {
  // Every rank sends to both neighbours before it receives: the transfers must not wait on each other.
  int64_t next = (rank + 1) % world;
  int64_t previous = (rank + world - 1) % world;
  if (world < 2) GTEST_SKIP();
  Tensor to_next = make_filled<int32_t>({3}, {static_cast<int32_t>(rank), 1, 2});
  Tensor to_previous = make_filled<int32_t>({3}, {static_cast<int32_t>(rank), 3, 4});
  Tensor from_previous = make_tensor({3}, kInt32, kCPU);
  Tensor from_next = make_tensor({3}, kInt32, kCPU);
  std::vector<std::shared_ptr<Work>> works{group().send(to_next, next), group().send(to_previous, previous),
                                           group().recv(from_previous, previous), group().recv(from_next, next)};
  for (auto& work : works) work->wait();
  EXPECT_EQ(contents<int32_t>(from_previous), (std::vector<int32_t>{static_cast<int32_t>(previous), 1, 2}));
  EXPECT_EQ(contents<int32_t>(from_next), (std::vector<int32_t>{static_cast<int32_t>(next), 3, 4}));
}

TEST_F(Collectives, AsynchronousWorkOverlapsAndCompletesInOrder) {
  constexpr int kCollectives = 8;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kCollectives; ++k) {
    tensors.push_back(make_filled<float>({1000}, std::vector<float>(1000, static_cast<float>(rank + k))));
    works.push_back(group().all_reduce(tensors.back(), ReduceOp::kSum, {}));
  }
  double local = 0;  // compute while the collectives run
  for (int i = 0; i < 100000; ++i) local += i * 0.5;
  EXPECT_GT(local, 0);
  float rank_sum = static_cast<float>(world * (world - 1) / 2);
  for (int k = 0; k < kCollectives; ++k) {
    works[k]->wait();
    EXPECT_TRUE(works[k]->completed());
    EXPECT_EQ(contents<float>(tensors[k]), std::vector<float>(1000, rank_sum + static_cast<float>(world * k)));
  }
}

TEST_F(Collectives, Barrier) {
  for (int i = 0; i < 3; ++i) flow::distributed::barrier();
  EXPECT_EQ(get_world_size(), world);
  EXPECT_EQ(group().local_rank(), rank);
}

}  // namespace
}  // namespace flow::distributed::testing
