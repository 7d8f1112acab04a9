// Writes the image corpus (tests/support/image_corpus.h) into a directory, one file per
// image: for the Python conformance test (tests/python/test_image_conformance.py) and,
// with --small, for the image fuzzer's seeds.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "tests/support/image_corpus.h"

int main(int argc, char** argv) {
  const bool small = argc == 3 && std::strcmp(argv[1], "--small") == 0;
  if (argc != 2 && !small) {
    std::fprintf(stderr, "usage: make_image_corpus [--small] DIRECTORY\n");
    return 2;
  }
  const std::string dir = argv[argc - 1];
  for (const auto& file : shardcast::image_corpus::MakeCorpus(small)) {
    std::ofstream out(dir + "/" + file.name, std::ios::binary);
    out.write(file.bytes.data(), static_cast<std::streamsize>(file.bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), file.name.c_str());
      return 1;
    }
    std::printf("%s %zu\n", file.name.c_str(), file.bytes.size());
  }
  return 0;
}
