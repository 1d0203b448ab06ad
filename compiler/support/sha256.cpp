// SHA-256, written from the FIPS 180-4 specification: 64-byte blocks, a message schedule of 64
// words, 64 rounds; the message is padded with 0x80, zeros and its bit length (big-endian).
#include "support/sha256.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

namespace orthojit {
namespace {

uint32_t rotate_right(uint32_t value, int bits) { return (value >> bits) | (value << (32 - bits)); }

void compress(std::array<uint32_t, 8>& state, const unsigned char* block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (uint32_t{block[4 * i]} << 24) | (uint32_t{block[4 * i + 1]} << 16) | (uint32_t{block[4 * i + 2]} << 8) | uint32_t{block[4 * i + 3]};
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = rotate_right(w[i - 15], 7) ^ rotate_right(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = rotate_right(w[i - 2], 17) ^ rotate_right(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t s1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
    const uint32_t choice = (e & f) ^ (~e & g);
    const uint32_t t1 = h + s1 + choice + detail::kSha256RoundConstants[i] + w[i];
    const uint32_t s0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = s0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

}  // namespace

bool sha256_x86_available() { return detail::sha256_x86_supported(); }

Sha256::Sha256(Sha256Implementation implementation) : implementation_(implementation) {
  if (implementation_ == Sha256Implementation::Automatic)
    implementation_ = sha256_x86_available() ? Sha256Implementation::X86ShaExtensions : Sha256Implementation::Portable;
  if (implementation_ == Sha256Implementation::X86ShaExtensions && !sha256_x86_available())
    throw std::runtime_error("sha256: this CPU does not report the x86 SHA extensions (CPUID.7.0:EBX bit 29, with SSSE3 and SSE4.1)");
  const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::copy(initial, initial + 8, state_);
}

void Sha256::blocks(const unsigned char* data, size_t count) {
  if (implementation_ == Sha256Implementation::X86ShaExtensions) {
    detail::sha256_blocks_x86(state_, data, count);
    return;
  }
  std::array<uint32_t, 8> state;
  std::copy(state_, state_ + 8, state.begin());
  for (size_t block = 0; block < count; ++block) compress(state, data + 64 * block);
  std::copy(state.begin(), state.end(), state_);
}

void Sha256::update(std::string_view data) {
  if (finished_) throw std::logic_error("Sha256::update after hex_digest");
  auto bytes = reinterpret_cast<const unsigned char*>(data.data());
  size_t size = data.size();
  length_ += size;
  if (pending_size_ > 0) {
    const size_t take = std::min(size, 64 - pending_size_);
    std::memcpy(pending_ + pending_size_, bytes, take);
    pending_size_ += take;
    bytes += take;
    size -= take;
    if (pending_size_ < 64) return;
    blocks(pending_, 1);
    pending_size_ = 0;
  }
  blocks(bytes, size / 64);
  pending_size_ = size % 64;
  std::memcpy(pending_, bytes + size / 64 * 64, pending_size_);
}

std::string Sha256::hex_digest() {
  if (finished_) throw std::logic_error("Sha256::hex_digest called twice");
  finished_ = true;
  // The tail, 0x80, zeros, and the length in bits: one or two final blocks.
  unsigned char tail[128] = {};
  std::memcpy(tail, pending_, pending_size_);
  tail[pending_size_] = 0x80;
  const size_t tail_length = pending_size_ + 1 + 8 <= 64 ? 64 : 128;
  const uint64_t bits = length_ * 8;
  for (int i = 0; i < 8; ++i) tail[tail_length - 1 - static_cast<size_t>(i)] = static_cast<unsigned char>(bits >> (8 * i));
  blocks(tail, tail_length / 64);
  std::string hex;
  char digits[9];
  for (uint32_t word : state_) {
    std::snprintf(digits, sizeof digits, "%08x", word);
    hex += digits;
  }
  return hex;
}

std::string sha256_hex(std::string_view data, Sha256Implementation implementation) {
  Sha256 digest(implementation);
  digest.update(data);
  return digest.hex_digest();
}

}  // namespace orthojit
