// A valid lossless WebP that makes libwebp build the most entropy-code tables a stream
// can name: what webp_decode_test measures WebpDecodeBytes against and decode_memory_test
// serves. No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_HOSTILE_WEBP_H_
#define SHARDCAST_TESTS_SUPPORT_HOSTILE_WEBP_H_

#include <cstdint>
#include <string>

namespace shardcast::testing_util {

// The VP8L bit order: values least significant bit first, bytes filled from bit 0.
class Vp8lBitWriter {
 public:
  void Write(uint32_t value, int bits) {
    for (int i = 0; i < bits; ++i) {
      if (used_ % 8 == 0) bytes_.push_back('\0');
      bytes_.back() = static_cast<char>(bytes_.back() | (((value >> i) & 1) << (used_ % 8)));
      ++used_;
    }
  }
  // A Huffman code is read from its most significant bit on.
  void WriteCode(uint32_t code, int length) {
    for (int i = length - 1; i >= 0; --i) Write((code >> i) & 1, 1);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
  int64_t used_ = 0;
};

namespace hostile_webp_internal {

inline void AppendLe32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// A simple code of one 1-bit symbol, 0: is_simple, num_symbols - 1, is_first_8bits,
// the symbol. 4 bits, the fewest a code takes; decoding with it reads no bits.
inline void WriteOneSymbolCode(Vp8lBitWriter* w) {
  w->Write(1, 1);
  w->Write(0, 1);
  w->Write(0, 1);
  w->Write(0, 1);
}

// A normal code over `alphabet` symbols giving symbols 0..255 length 8 (so symbol s is
// the 8-bit code s) and the rest none. Its code-length code has two 1-bit codes: 0
// for length 0 and 1 for length 8; their lengths are listed in kCodeLengthCodeOrder
// (17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, ...), so 12 of them reach length 8's.
inline void WriteAllBytesCode(Vp8lBitWriter* w, int alphabet) {
  w->Write(0, 1);       // not simple
  w->Write(12 - 4, 4);  // 12 code-length code lengths follow
  for (int symbol : {17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8}) {
    w->Write(symbol == 0 || symbol == 8 ? 1 : 0, 3);
  }
  w->Write(0, 1);  // a length for every symbol of the alphabet
  for (int s = 0; s < alphabet; ++s) w->WriteCode(s < 256 ? 1 : 0, 1);
}

}  // namespace hostile_webp_internal

// A width x height lossless WebP (width, height >= 1024 so that the entropy image has
// 65,536 pixels) whose entropy image, at its finest (4x4 blocks), names every group
// 0..65535 once, each group five one-symbol codes: libwebp 1.2.4 builds 5 x 256 table
// entries for each before decoding a pixel. Every pixel is then transparent black,
// decoded without reading a bit. 1024 x 1024: 295 KB.
inline std::string ManyEntropyGroupsWebp(int width = 1024, int height = 1024) {
  namespace internal = hostile_webp_internal;
  Vp8lBitWriter w;
  w.Write(0x2f, 8);  // the VP8L signature
  w.Write(static_cast<uint32_t>(width - 1), 14);
  w.Write(static_cast<uint32_t>(height - 1), 14);
  w.Write(0, 1);  // alpha_is_used
  w.Write(0, 3);  // version
  w.Write(0, 1);  // no transform
  w.Write(0, 1);  // no colour cache
  w.Write(1, 1);  // meta Huffman codes: an entropy image
  w.Write(0, 3);  // its precision: 0 + 2 bits, 4x4 blocks
  const int blocks_wide = (width + 3) / 4, blocks_high = (height + 3) / 4;
  // The entropy image: one group, green and red every byte, blue, alpha and distance
  // one symbol; its pixel i holds group i (green the low byte, red the high one).
  w.Write(0, 1);                              // no colour cache
  internal::WriteAllBytesCode(&w, 256 + 24);  // green (and the LZ77 lengths)
  internal::WriteAllBytesCode(&w, 256);       // red
  for (int code = 0; code < 3; ++code) internal::WriteOneSymbolCode(&w);
  const int64_t entropy_pixels = int64_t{blocks_wide} * blocks_high;
  for (int64_t i = 0; i < entropy_pixels; ++i) {
    const uint32_t group = static_cast<uint32_t>(i % 65536);
    w.WriteCode(group & 0xFF, 8);  // green
    w.WriteCode(group >> 8, 8);    // red
  }
  // The groups the entropy image names, five codes each.
  const int64_t groups = entropy_pixels < 65536 ? entropy_pixels : 65536;
  for (int64_t g = 0; g < groups * 5; ++g) internal::WriteOneSymbolCode(&w);
  std::string payload = w.bytes();
  payload.append(8, '\0');  // slack for the bit reader's look-ahead
  std::string chunk = "VP8L";
  internal::AppendLe32(&chunk, static_cast<uint32_t>(payload.size()));
  chunk += payload;
  if (payload.size() % 2 == 1) chunk.push_back('\0');
  std::string file = "RIFF";
  internal::AppendLe32(&file, static_cast<uint32_t>(4 + chunk.size()));
  return file + "WEBP" + chunk;
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_HOSTILE_WEBP_H_
