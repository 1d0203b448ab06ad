// SHA-256 against the FIPS 180-4 / NIST example digests, across the padding boundaries.
#include <gtest/gtest.h>

#include <string>

#include "support/sha256.h"

namespace orthojit {
namespace {

TEST(Sha256, NistExamples) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 56 bytes: the length no longer fits the first padding block.
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // One million 'a': many full blocks.
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, EveryByteChangesTheDigest) {
  const std::string base(130, 'x');
  const std::string digest = sha256_hex(base);
  for (size_t i = 0; i < base.size(); ++i) {
    std::string changed = base;
    changed[i] = 'y';
    EXPECT_NE(sha256_hex(changed), digest) << i;
  }
}

}  // namespace
}  // namespace orthojit
