// SHA-256's block function on the x86 SHA extensions (SHA-NI: sha256rnds2, sha256msg1,
// sha256msg2; Intel since Goldmont and Ice Lake, AMD since Zen). About 4-6x the portable
// block function (sha256.cpp): a warm load from the CUDA program cache checksums a cubin of
// 0.4-0.8 MB, and a Muon state file checksums every tensor.
//
// The instructions work on the state as two vectors, (A, B, E, F) and (C, D, G, H), in that
// order from the high lane down; sha256rnds2 does two rounds with the message-plus-constant
// words in the low two lanes of its third operand, and sha256msg1/msg2 compute the message
// schedule four words at a time (W[t-16] + σ0(W[t-15]) then + σ1(W[t-2])). Layout and
// semantics from the Intel SHA Extensions paper (Gulley et al., Intel, 2013) and the Intel SDM.
#include "support/sha256.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace orthojit::detail {

#if defined(__x86_64__) || defined(__i386__)

bool sha256_x86_supported() {
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const bool ssse3 = ecx & (1u << 9), sse41 = ecx & (1u << 19);
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool sha = ebx & (1u << 29);
    return ssse3 && sse41 && sha;
  }();
  return supported;
}

__attribute__((target("sha,sse4.1,ssse3"))) void sha256_blocks_x86(uint32_t state[8], const unsigned char* data, size_t blocks) {
  // state[0..3] = A B C D, state[4..7] = E F G H (lane 0 first) -> ABEF and CDGH, high lane first.
  const __m128i abcd = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));
  const __m128i efgh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));
  const __m128i cdab = _mm_shuffle_epi32(abcd, 0xB1);
  const __m128i hgfe = _mm_shuffle_epi32(efgh, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, hgfe, 8);
  __m128i cdgh = _mm_blend_epi16(hgfe, cdab, 0xF0);
  // The message words are big-endian: reverse the bytes of each 32-bit lane.
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  for (size_t block = 0; block < blocks; ++block, data += 64) {
    const __m128i abef_start = abef, cdgh_start = cdgh;
    __m128i w[16];  // w[i]: message words 4i .. 4i+3
    for (int i = 0; i < 16; ++i) {
      if (i < 4) w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data + 16 * i)), byte_swap);
      else {
        // W[t] = σ1(W[t-2]) + W[t-7] + σ0(W[t-15]) + W[t-16]; words 4i-7 .. 4i-4 are the
        // middle of w[i-2] and w[i-1].
        const __m128i partial = _mm_add_epi32(_mm_sha256msg1_epu32(w[i - 4], w[i - 3]), _mm_alignr_epi8(w[i - 1], w[i - 2], 4));
        w[i] = _mm_sha256msg2_epu32(partial, w[i - 1]);
      }
      const __m128i words = _mm_add_epi32(w[i], _mm_load_si128(reinterpret_cast<const __m128i*>(kSha256RoundConstants + 4 * i)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, words);                           // rounds 4i, 4i+1
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(words, 0x0E));  // rounds 4i+2, 4i+3
    }
    abef = _mm_add_epi32(abef, abef_start);
    cdgh = _mm_add_epi32(cdgh, cdgh_start);
  }
  // Back to A B C D / E F G H.
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

#else

bool sha256_x86_supported() { return false; }
void sha256_blocks_x86(uint32_t*, const unsigned char*, size_t) {}

#endif

}  // namespace orthojit::detail
