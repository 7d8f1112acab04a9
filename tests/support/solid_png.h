// Huge solid-colour PNGs written in milliseconds: what decode_memory_test and
// bench/decode_memory_bench.cc serve to fill the decode budget. No gtest dependency.
#ifndef SHARDCAST_TESTS_SUPPORT_SOLID_PNG_H_
#define SHARDCAST_TESTS_SUPPORT_SOLID_PNG_H_

#include <zlib.h>

#include <cstdint>
#include <string>

namespace shardcast::testing_util {

inline void AppendBigEndian32(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

inline void AppendPngChunk(const char* type, const std::string& data, std::string* png) {
  AppendBigEndian32(static_cast<uint32_t>(data.size()), png);
  const std::string typed = std::string(type, 4) + data;
  png->append(typed);
  AppendBigEndian32(
      static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())),
      png);
}

// A solid 8-bit RGB PNG of width x height. Every row is the same ("Sub" filter: the
// colour, then zero differences), so one block of 100 rows is compressed once, ended
// with a full flush (no reference to earlier data), and repeated: writing it costs
// milliseconds where deflating 536 MB would take seconds.
// REQUIRES: height is a multiple of 100. Returns "" if zlib fails.
inline std::string SolidPng(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  constexpr int kRowsPerBlock = 100;
  if (height % kRowsPerBlock != 0) return "";
  std::string row(1 + 3 * static_cast<size_t>(width), '\0');
  row[0] = 1;  // filter type Sub
  row[1] = static_cast<char>(r);
  row[2] = static_cast<char>(g);
  row[3] = static_cast<char>(b);
  std::string rows;
  for (int i = 0; i < kRowsPerBlock; ++i) rows += row;

  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY) != Z_OK) return "";  // raw
  std::string block(deflateBound(&z, rows.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(rows.data());
  z.avail_in = static_cast<uInt>(rows.size());
  z.next_out = reinterpret_cast<Bytef*>(block.data());
  z.avail_out = static_cast<uInt>(block.size());
  const int flushed = deflate(&z, Z_FULL_FLUSH);
  deflateEnd(&z);
  if (flushed != Z_OK) return "";
  block.resize(block.size() - z.avail_out);

  const uLong block_adler = adler32(1, reinterpret_cast<const Bytef*>(rows.data()), rows.size());
  uLong adler = adler32(0, nullptr, 0);
  std::string idat = "\x78\xda";  // zlib header: deflate, 32K window, best compression
  for (int i = 0; i < height / kRowsPerBlock; ++i) {
    idat += block;
    adler = adler32_combine(adler, block_adler, static_cast<z_off_t>(rows.size()));
  }
  idat += std::string("\x03\x00", 2);  // final, empty fixed-Huffman block
  AppendBigEndian32(static_cast<uint32_t>(adler), &idat);

  std::string png("\x89PNG\r\n\x1a\n", 8);
  std::string ihdr;
  AppendBigEndian32(static_cast<uint32_t>(width), &ihdr);
  AppendBigEndian32(static_cast<uint32_t>(height), &ihdr);
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit RGB, no interlace
  AppendPngChunk("IHDR", ihdr, &png);
  AppendPngChunk("IDAT", idat, &png);
  AppendPngChunk("IEND", "", &png);
  return png;
}

}  // namespace shardcast::testing_util

#endif  // SHARDCAST_TESTS_SUPPORT_SOLID_PNG_H_
