// The MPI engine's collectives, under mpirun with 1 to 4 processes, each against the formula it
// must give, with the largest message at its default (one piece) and tiny (4 to 13 bytes: every
// collective in many pieces, the path that transfers past MPI's int counts take). Sizes are
// odd (bytes that are not whole floats, blocks that are not whole pieces), values are small
// integers whose sums are exact in f32, and receive buffers are poisoned first, so a piece
// placed at the wrong offset, lost or reduced twice shows as a wrong element.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/zero/mpi_communicator.h"
#include "tests/mpi_test_main.h"

#pragma GCC diagnostic ignored "-Wold-style-cast"  // MPI's C macros

namespace orthojit::runtime {
namespace {

class MpiPieces : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { communicator = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, GetParam()); }
  std::unique_ptr<MpiCommunicator> communicator;
  int rank() const { return communicator->rank(); }
  int world() const { return communicator->world(); }
};

// Rank r's value at element i: small integers (sums exact in f32).
float value(int r, int64_t i) { return static_cast<float>((r + 1) * 7 + (i % 13)); }
unsigned char byte(int r, int64_t i) { return static_cast<unsigned char>(r * 31 + i * 7 + 1); }

TEST_P(MpiPieces, AllReduceSumsEveryElement) {
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1001}}) {
    std::vector<float> data(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) data[static_cast<size_t>(i)] = value(rank(), i);
    communicator->all_reduce_sum(data.data(), count);
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world(); ++r) expected += value(r, i);
      ASSERT_EQ(data[static_cast<size_t>(i)], expected) << "element " << i << " of " << count;
    }
  }
}

TEST_P(MpiPieces, ReduceScatterGivesEachRankTheSumOfItsBlock) {
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{333}}) {
    std::vector<float> send(static_cast<size_t>(count * world()));
    for (int64_t i = 0; i < count * world(); ++i) send[static_cast<size_t>(i)] = value(rank(), i);
    std::vector<float> receive(static_cast<size_t>(count), -1.0f);
    communicator->reduce_scatter_sum(send.data(), receive.data(), count);
    for (int64_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < world(); ++r) expected += value(r, rank() * count + i);
      ASSERT_EQ(receive[static_cast<size_t>(i)], expected) << "element " << i << " of " << count;
    }
  }
}

TEST_P(MpiPieces, AllGatherPlacesEveryRanksBlock) {
  for (int64_t bytes : {int64_t{0}, int64_t{3}, int64_t{37}, int64_t{4099}}) {
    std::vector<unsigned char> send(static_cast<size_t>(bytes)), receive(static_cast<size_t>(bytes * world()), 0xEE);
    for (int64_t i = 0; i < bytes; ++i) send[static_cast<size_t>(i)] = byte(rank(), i);
    communicator->all_gather(send.data(), bytes, receive.data());
    for (int r = 0; r < world(); ++r)
      for (int64_t i = 0; i < bytes; ++i) ASSERT_EQ(receive[static_cast<size_t>(r * bytes + i)], byte(r, i)) << "rank " << r << " byte " << i << " of " << bytes;
  }
}

TEST_P(MpiPieces, BroadcastCopiesTheRootsBytes) {
  const int root = world() - 1;
  std::vector<unsigned char> data(777);
  for (size_t i = 0; i < data.size(); ++i) data[i] = rank() == root ? byte(root, static_cast<int64_t>(i)) : 0xEE;
  communicator->broadcast(data.data(), static_cast<int64_t>(data.size()), root);
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], byte(root, static_cast<int64_t>(i))) << "byte " << i;
}

// Every rank sends a differently sized buffer to each other rank (sizes from both ranks, so that
// a receive of the wrong size fails) and receives theirs, several transfers per pair.
TEST_P(MpiPieces, ExchangeDeliversEveryTransferInOrder) {
  auto size = [](int from, int to, int which) { return int64_t{3} + 11 * from + 5 * to + 17 * which; };
  std::vector<std::vector<unsigned char>> outgoing, incoming;
  std::vector<Communicator::Transfer> sends, receives;
  for (int peer = 0; peer < world(); ++peer) {
    if (peer == rank()) continue;
    for (int which = 0; which < 2; ++which) {
      std::vector<unsigned char> out(static_cast<size_t>(size(rank(), peer, which)));
      for (size_t i = 0; i < out.size(); ++i) out[i] = byte(rank() * 8 + which, static_cast<int64_t>(i));
      outgoing.push_back(std::move(out));
      incoming.emplace_back(static_cast<size_t>(size(peer, rank(), which)), 0xEE);
    }
  }
  size_t slot = 0;
  for (int peer = 0; peer < world(); ++peer) {
    if (peer == rank()) continue;
    for (int which = 0; which < 2; ++which, ++slot) {
      sends.push_back({peer, outgoing[slot].data(), static_cast<int64_t>(outgoing[slot].size())});
      receives.push_back({peer, incoming[slot].data(), static_cast<int64_t>(incoming[slot].size())});
    }
  }
  communicator->exchange(sends, receives);
  slot = 0;
  for (int peer = 0; peer < world(); ++peer) {
    if (peer == rank()) continue;
    for (int which = 0; which < 2; ++which, ++slot)
      for (size_t i = 0; i < incoming[slot].size(); ++i)
        ASSERT_EQ(incoming[slot][i], byte(peer * 8 + which, static_cast<int64_t>(i))) << "from rank " << peer << " transfer " << which << " byte " << i;
  }
}

TEST(MpiCommunicatorTest, TheLargestMessageMustFitAnInt) {
  EXPECT_THROW(MpiCommunicator(MPI_COMM_WORLD, 3), std::invalid_argument);
  EXPECT_THROW(MpiCommunicator(MPI_COMM_WORLD, int64_t{1} << 31), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(LargestMessage, MpiPieces, ::testing::Values(MpiCommunicator::kLargestMessageBytes, int64_t{4}, int64_t{13}));

}  // namespace
}  // namespace orthojit::runtime

int main(int argc, char** argv) {
  return run_tests_on_every_rank(argc, argv, [](int) { return RUN_ALL_TESTS(); });
}
