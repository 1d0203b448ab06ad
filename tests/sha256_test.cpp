// SHA-256 against the FIPS 180-4 / NIST example digests, across the padding boundaries, for the
// portable block function and the x86 SHA extensions (where this CPU has them; the portable one
// is the reference for random messages of every length up to several blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "support/sha256.h"

namespace orthojit {
namespace {

std::vector<Sha256Implementation> implementations() {
  std::vector<Sha256Implementation> list = {Sha256Implementation::Automatic, Sha256Implementation::Portable};
  if (sha256_x86_available()) list.push_back(Sha256Implementation::X86ShaExtensions);
  return list;
}

TEST(Sha256, NistExamples) {
  for (Sha256Implementation implementation : implementations()) {
    SCOPED_TRACE(static_cast<int>(implementation));
    EXPECT_EQ(sha256_hex("", implementation), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", implementation), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // 56 bytes: the length no longer fits the first padding block.
    EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", implementation),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // 112 bytes (FIPS 180-4's two-block example for SHA-512, digest from NIST's SHA-256 examples).
    EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", implementation),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    // One million 'a': many full blocks.
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a'), implementation), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

TEST(Sha256, ExtensionsAgreeWithThePortableBlockFunction) {
  if (!sha256_x86_available()) GTEST_SKIP() << "this CPU does not report the x86 SHA extensions; the portable block function is the only one";
  std::mt19937_64 random(std::random_device{}());
  std::string message;
  // Every length up to five blocks (each padding case, each number of whole blocks), then large.
  for (size_t length = 0; length <= 320; ++length) {
    message.resize(length);
    for (char& c : message) c = static_cast<char>(random());
    ASSERT_EQ(sha256_hex(message, Sha256Implementation::X86ShaExtensions), sha256_hex(message, Sha256Implementation::Portable)) << "length " << length;
  }
  message.resize(1 << 20);
  for (char& c : message) c = static_cast<char>(random());
  EXPECT_EQ(sha256_hex(message, Sha256Implementation::X86ShaExtensions), sha256_hex(message, Sha256Implementation::Portable));
}

TEST(Sha256, AskingForMissingExtensionsSaysSo) {
  if (sha256_x86_available()) GTEST_SKIP() << "this CPU has the x86 SHA extensions";
  EXPECT_THROW(sha256_hex("abc", Sha256Implementation::X86ShaExtensions), std::runtime_error);
}

// Data fed in pieces of random lengths (0 to a few blocks, so pieces end inside, at and across
// block boundaries) gives the digest of the whole: the NIST million 'a', and random messages
// against the one-call digest (which takes the whole-block path without a partial block).
TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
  std::mt19937 random(std::random_device{}());
  for (Sha256Implementation implementation : implementations()) {
    SCOPED_TRACE(static_cast<int>(implementation));
    const std::string million(1000000, 'a');
    Sha256 streamed(implementation);
    for (size_t at = 0; at < million.size();) {
      const size_t piece = std::min(million.size() - at, static_cast<size_t>(random() % 300));
      streamed.update(std::string_view(million).substr(at, piece));
      at += piece;
    }
    EXPECT_EQ(streamed.bytes(), million.size());
    EXPECT_EQ(streamed.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    for (int trial = 0; trial < 200; ++trial) {
      std::string message(random() % 400, '\0');
      for (char& c : message) c = static_cast<char>(random());
      Sha256 pieces(implementation);
      for (size_t at = 0; at < message.size();) {
        const size_t piece = std::min(message.size() - at, static_cast<size_t>(random() % 130));
        pieces.update(std::string_view(message).substr(at, piece));
        at += piece;
      }
      ASSERT_EQ(pieces.hex_digest(), sha256_hex(message, Sha256Implementation::Portable)) << "length " << message.size();
    }
  }
  Sha256 finished;
  finished.update("abc");
  EXPECT_EQ(finished.hex_digest(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_THROW(finished.update("d"), std::logic_error);
  EXPECT_THROW(finished.hex_digest(), std::logic_error);
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
