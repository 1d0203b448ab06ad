// The single-process communicator (see communicator.h).
#include "runtime/zero/communicator.h"

#include <cstring>
#include <stdexcept>

namespace orthojit::runtime {

void LocalCommunicator::reduce_scatter_sum(const float* send, float* receive, int64_t count) {
  if (send != receive) std::memmove(receive, send, static_cast<size_t>(count) * sizeof(float));
}

void LocalCommunicator::all_gather(const void* send, int64_t bytes, void* receive) {
  if (send != receive) std::memmove(receive, send, static_cast<size_t>(bytes));
}

void LocalCommunicator::broadcast(void*, int64_t, int root) {
  if (root != 0) throw std::invalid_argument("broadcast: root " + std::to_string(root) + " outside a world of 1");
}

void LocalCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  // With one rank, every transfer is to itself: pair them in order.
  if (sends.size() != receives.size()) throw std::invalid_argument("exchange: unmatched transfers in a world of 1");
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i].peer != 0 || receives[i].peer != 0 || sends[i].bytes != receives[i].bytes) throw std::invalid_argument("exchange: bad transfer in a world of 1");
    std::memmove(receives[i].data, sends[i].data, static_cast<size_t>(sends[i].bytes));
  }
}

}  // namespace orthojit::runtime
