// The MPI engine (see mpi_communicator.h).
#include "runtime/zero/mpi_communicator.h"

#include <climits>
#include <stdexcept>

// MPI's handles and constants (MPI_COMM_WORLD, MPI_FLOAT, MPI_IN_PLACE, ...) are C macros that
// expand to C-style casts in Open MPI's mpi.h; this file is where they are used.
#pragma GCC diagnostic ignored "-Wold-style-cast"

namespace orthojit::runtime {
namespace {

void check(int result, const char* what) {
  if (result == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(result, text, &length);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

// MPI counts are int: larger transfers go as MPI_BYTE chunks of a derived type would, but the
// plans here never need it; say so clearly instead of truncating.
int count_of(int64_t count, const char* what) {
  if (count < 0 || count > INT_MAX) throw std::invalid_argument(std::string(what) + ": " + std::to_string(count) + " elements exceed MPI's int counts");
  return static_cast<int>(count);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm communicator) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw std::runtime_error("MpiCommunicator: MPI is not initialized (call MPI_Init first)");
  check(MPI_Comm_dup(communicator, &communicator_), "MPI_Comm_dup");
  check(MPI_Comm_rank(communicator_, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(communicator_, &world_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && communicator_ != MPI_COMM_NULL) MPI_Comm_free(&communicator_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::on_world() { return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD); }

std::string MpiCommunicator::describe() const {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<size_t>(length));
  if (auto end = library.find_first_of(",\n"); end != std::string::npos) library.resize(end);
  return "MPI (" + library + "), rank " + std::to_string(rank_) + " of " + std::to_string(world_);
}

void MpiCommunicator::all_reduce_sum(float* data, int64_t count) {
  check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(count, "all_reduce"), MPI_FLOAT, MPI_SUM, communicator_), "MPI_Allreduce");
  bytes_sent_ += 2 * (world_ - 1) * count * 4 / world_;
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* receive, int64_t count) {
  check(MPI_Reduce_scatter_block(send, receive, count_of(count, "reduce_scatter"), MPI_FLOAT, MPI_SUM, communicator_), "MPI_Reduce_scatter_block");
  bytes_sent_ += (world_ - 1) * count * 4;
}

void MpiCommunicator::all_gather(const void* send, int64_t bytes, void* receive) {
  check(MPI_Allgather(send, count_of(bytes, "all_gather"), MPI_BYTE, receive, count_of(bytes, "all_gather"), MPI_BYTE, communicator_), "MPI_Allgather");
  bytes_sent_ += (world_ - 1) * bytes;
}

void MpiCommunicator::all_gather_v(const void* send, void* receive, const std::vector<int64_t>& bytes) {
  if (static_cast<int>(bytes.size()) != world_) throw std::invalid_argument("all_gather_v: one size per rank");
  std::vector<int> counts(bytes.size()), offsets(bytes.size());
  int64_t offset = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    counts[r] = count_of(bytes[r], "all_gather_v");
    offsets[r] = count_of(offset, "all_gather_v offset");
    offset += bytes[r];
  }
  check(MPI_Allgatherv(send, counts[static_cast<size_t>(rank_)], MPI_BYTE, receive, counts.data(), offsets.data(), MPI_BYTE, communicator_), "MPI_Allgatherv");
  bytes_sent_ += (world_ - 1) * bytes[static_cast<size_t>(rank_)];
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= world_) throw std::invalid_argument("broadcast: root " + std::to_string(root) + " outside the world");
  check(MPI_Bcast(data, count_of(bytes, "broadcast"), MPI_BYTE, root, communicator_), "MPI_Bcast");
  bytes_sent_ += (world_ - 1) * bytes / world_;
}

void MpiCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  std::vector<MPI_Request> requests(sends.size() + receives.size());
  size_t next = 0;
  for (const Transfer& receive : receives)
    check(MPI_Irecv(receive.data, count_of(receive.bytes, "exchange"), MPI_BYTE, receive.peer, 7, communicator_, &requests[next++]), "MPI_Irecv");
  for (const Transfer& send : sends) {
    check(MPI_Isend(send.data, count_of(send.bytes, "exchange"), MPI_BYTE, send.peer, 7, communicator_, &requests[next++]), "MPI_Isend");
    bytes_sent_ += send.bytes;
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace orthojit::runtime
