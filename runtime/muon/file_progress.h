// How far a long state-file transfer has come. A large model's optimizer state is tens to
// hundreds of gigabytes (Llama-3-70B under Muon: 4 bytes of momentum per Muon element plus 8 of
// AdamW moments per embedding element, ~290 GB), which takes minutes to write, hash and flush at
// a disk's 1-2 GB/s; the safetensors writer and reader report each phase as it advances, and the
// caller shows it (runtime/muon/progress_line.h on a terminal or in a log, a Python callable).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace orthojit::runtime {

struct FileProgress {
  // "write":    bytes given to the writer so far, of the data buffer's;
  // "read":     bytes the reader has read so far, of the data buffer's (a reader of a part of the
  //             file, as each rank of the distributed optimizer, stops short of the total);
  // "checksum": bytes of the data buffer hashed so far (the pass over what did not arrive in the
  //             data's order: a commit, or verify_checksum);
  // "sync":     the written file flushed to the disk: 0 of 1 before, 1 of 1 after.
  std::string_view phase;
  uint64_t done = 0, total = 0;
};

// Called on the thread doing the transfer, after each piece; an exception it throws ends the
// transfer as a failed write or read does (a writer then removes its temporary file).
using FileProgressCallback = std::function<void(const FileProgress&)>;

}  // namespace orthojit::runtime
