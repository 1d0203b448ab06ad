// Ordering the uses of a shared runner (see stream_order.h).
#include "cuda/stream_order.h"

#include <algorithm>
#include <memory>

#include "cuda/cuda_driver.h"

namespace orthojit::cuda {

StreamOrder::StreamOrder(Driver driver) : driver_(std::move(driver)) {}

StreamOrder::~StreamOrder() {
  if (last_end_) driver_.destroy_event(last_end_);
}

StreamOrder::Use::Use(StreamOrder& order, CUstream stream) : order_(order), lock_(order.mutex_), stream_(stream) {
  // The previous use's kernels may still run on its stream: this stream starts after them. On the
  // same stream the stream itself orders them (no wait, no event).
  if (order_.used_ && order_.last_stream_ != stream_) order_.driver_.wait(stream_, order_.last_end_);
}

StreamOrder::Use::~Use() {
  try {
    if (!order_.last_end_) order_.last_end_ = order_.driver_.create_event();
    order_.driver_.record(order_.last_end_, stream_);
    order_.last_stream_ = stream_;
    order_.used_ = true;
  } catch (...) {
  }
}

StreamOrder::Uses::Uses(std::vector<StreamOrder*> orders, CUstream stream) {
  std::sort(orders.begin(), orders.end(), std::less<StreamOrder*>());
  orders.erase(std::unique(orders.begin(), orders.end()), orders.end());
  for (StreamOrder* order : orders)
    if (order) uses_.push_back(std::make_unique<Use>(*order, stream));
}

StreamOrder::Driver cuda_stream_order_driver() {
  StreamOrder::Driver driver;
  driver.create_event = [] {
    const Device& device = Device::get();
    device.make_current();
    CUevent event = nullptr;
    check(device.api().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    return event;
  };
  driver.destroy_event = [](CUevent event) {
    const Device& device = Device::get();
    device.make_current_quietly();
    device.api().cuEventDestroy(event);
  };
  driver.record = [](CUevent event, CUstream stream) {
    const Device& device = Device::get();
    device.make_current();
    check(device.api().cuEventRecord(event, stream), "cuEventRecord (the end of a use of a shared runner)");
  };
  driver.wait = [](CUstream stream, CUevent event) {
    const Device& device = Device::get();
    device.make_current();
    check(device.api().cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent (after the previous use of a shared runner)");
  };
  return driver;
}

}  // namespace orthojit::cuda
