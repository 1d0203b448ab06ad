// The MPI engine (see mpi_communicator.h).
#include "runtime/zero/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

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

// A piece's count, at most `largest` (which is below INT_MAX).
int piece(int64_t remaining, int64_t largest) { return static_cast<int>(std::min(remaining, largest)); }

// A committed derived datatype, freed at the end of its scope.
struct Datatype {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  ~Datatype() {
    if (type != MPI_DATATYPE_NULL) MPI_Type_free(&type);
  }
};

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm communicator, int64_t largest_message_bytes) : largest_(largest_message_bytes) {
  if (largest_ < 4 || largest_ > INT_MAX)
    throw std::invalid_argument("MpiCommunicator: the largest message must be 4 to " + std::to_string(INT_MAX) + " bytes (got " + std::to_string(largest_) + ")");
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
  const int64_t floats = largest_ / 4;
  for (int64_t first = 0; first < count; first += floats)
    check(MPI_Allreduce(MPI_IN_PLACE, data + first, piece(count - first, floats), MPI_FLOAT, MPI_SUM, communicator_), "MPI_Allreduce");
  bytes_sent_ += 2 * (world_ - 1) * count * 4 / world_;
}

void MpiCommunicator::reduce_scatter_sum(const float* send, float* receive, int64_t count) {
  if (count * 4 <= largest_) {
    check(MPI_Reduce_scatter_block(send, receive, static_cast<int>(count), MPI_FLOAT, MPI_SUM, communicator_), "MPI_Reduce_scatter_block");
  } else {
    // Piece [first, first + n) of every rank's block, packed one block after another (a copy of
    // at most largest_ bytes in all), reduced into this rank's piece.
    const int64_t floats = std::max<int64_t>(1, largest_ / 4 / world_);
    std::vector<float> packed(static_cast<size_t>(floats * world_));
    for (int64_t first = 0; first < count; first += floats) {
      const int n = piece(count - first, floats);
      for (int r = 0; r < world_; ++r) std::memcpy(packed.data() + static_cast<int64_t>(r) * n, send + r * count + first, static_cast<size_t>(n) * 4);
      check(MPI_Reduce_scatter_block(packed.data(), receive + first, n, MPI_FLOAT, MPI_SUM, communicator_), "MPI_Reduce_scatter_block");
    }
  }
  bytes_sent_ += (world_ - 1) * count * 4;
}

void MpiCommunicator::all_gather(const void* send, int64_t bytes, void* receive) {
  if (bytes <= largest_) {
    check(MPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, receive, static_cast<int>(bytes), MPI_BYTE, communicator_), "MPI_Allgather");
  } else {
    // Each piece is one element of a type whose extent is a whole rank's block: rank r's piece
    // lands at r·bytes + first (an MPI_Aint, past int's range).
    for (int64_t first = 0; first < bytes; first += largest_) {
      const int n = piece(bytes - first, largest_);
      Datatype contiguous, strided;
      check(MPI_Type_contiguous(n, MPI_BYTE, &contiguous.type), "MPI_Type_contiguous");
      check(MPI_Type_create_resized(contiguous.type, 0, static_cast<MPI_Aint>(bytes), &strided.type), "MPI_Type_create_resized");
      check(MPI_Type_commit(&contiguous.type), "MPI_Type_commit");
      check(MPI_Type_commit(&strided.type), "MPI_Type_commit");
      check(MPI_Allgather(static_cast<const char*>(send) + first, 1, contiguous.type, static_cast<char*>(receive) + first, 1, strided.type, communicator_),
            "MPI_Allgather");
    }
  }
  bytes_sent_ += (world_ - 1) * bytes;
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
  if (root < 0 || root >= world_) throw std::invalid_argument("broadcast: root " + std::to_string(root) + " outside the world");
  for (int64_t first = 0; first < bytes; first += largest_)
    check(MPI_Bcast(static_cast<char*>(data) + first, piece(bytes - first, largest_), MPI_BYTE, root, communicator_), "MPI_Bcast");
  bytes_sent_ += (world_ - 1) * bytes / world_;
}

void MpiCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  // A transfer above largest_ goes as several messages; both sides cut it alike, and messages
  // between two ranks with one tag arrive in the order they were sent.
  std::vector<MPI_Request> requests;
  auto pieces = [&](const Transfer& transfer, bool receive) {
    if (transfer.bytes < 0) throw std::invalid_argument("exchange: a negative size");
    int64_t first = 0;
    do {
      const int n = piece(transfer.bytes - first, largest_);
      char* at = static_cast<char*>(transfer.data) + first;
      requests.emplace_back();
      if (receive) check(MPI_Irecv(at, n, MPI_BYTE, transfer.peer, 7, communicator_, &requests.back()), "MPI_Irecv");
      else check(MPI_Isend(at, n, MPI_BYTE, transfer.peer, 7, communicator_, &requests.back()), "MPI_Isend");
      first += n;
    } while (first < transfer.bytes);
  };
  for (const Transfer& receive : receives) pieces(receive, true);
  for (const Transfer& send : sends) {
    pieces(send, false);
    bytes_sent_ += send.bytes;
  }
  check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace orthojit::runtime
