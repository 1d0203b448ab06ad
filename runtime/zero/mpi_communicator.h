// The MPI engine of the communicator (Open MPI on Debian; any MPI-3 library): CPU processes,
// host buffers. Construct it on MPI_COMM_WORLD (after MPI_Init) or on the trainer's own
// communicator; it duplicates the communicator, so its traffic never mixes with the trainer's.
//
// MPI's counts and displacements are int: a transfer above `largest_message_bytes` (1 GiB by
// default) goes in pieces, so that models past 2^31 elements (the stage-1 all-reduce of a 7B
// model's gradients, a 7B model's 8-rank all-gather partitions of 3.5 GB) run instead of being
// refused: all-reduce and broadcast piece by piece in place, the all-gather with a datatype whose
// extent is one rank's block (each piece lands at every rank's place), the reduce-scatter through
// a packed copy of each piece of every rank's block, the variable all-gather as one broadcast per
// rank, point-to-point transfers as several messages in order (MPI's non-overtaking rule keeps
// them matched).
#pragma once

// The C API only (Open MPI's deprecated C++ bindings would otherwise come along).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

#include "runtime/zero/communicator.h"

namespace orthojit::runtime {

class MpiCommunicator : public Communicator {
 public:
  static constexpr int64_t kLargestMessageBytes = int64_t{1} << 30;
  // `largest_message_bytes`: the largest piece (at least 4 bytes; tests make it small so that
  // every collective goes in pieces).
  explicit MpiCommunicator(MPI_Comm communicator, int64_t largest_message_bytes = kLargestMessageBytes);
  // On MPI_COMM_WORLD.
  static std::unique_ptr<MpiCommunicator> on_world();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  std::string describe() const override;
  void all_reduce_sum(float* data, int64_t count) override;
  void reduce_scatter_sum(const float* send, float* receive, int64_t count) override;
  void all_gather(const void* send, int64_t bytes, void* receive) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;

  MPI_Comm handle() const { return communicator_; }

 private:
  MPI_Comm communicator_ = MPI_COMM_NULL;
  int rank_ = 0, world_ = 1;
  int64_t largest_ = kLargestMessageBytes;
};

}  // namespace orthojit::runtime
