#include "runtime/cuda/fatbin.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace gpukit {
namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kFatbinVersion = 1;
constexpr size_t kContainerHeaderBytes = 16;
// An image header: kind (u16) at 0, version (u16) at 2, header size (u32) at 4, padded
// payload size (u64) at 8, architecture (u32) at 28, flags (u64) at 40.
constexpr size_t kImageHeaderMinBytes = 48;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindElf = 2;
// Flags of a compressed payload: LZ4 (older toolkits) and the newer compressor (CUDA 12.8+).
constexpr uint64_t kCompressedFlags = 0x2000 | 0x8000;

template <typename T>
T Read(absl::string_view data, size_t offset) {
  T value;
  std::memcpy(&value, data.data() + offset, sizeof(T));  // little-endian, as the driver's
  return value;
}

}  // namespace

absl::StatusOr<std::vector<FatbinImage>> ParseFatbin(absl::string_view fatbin) {
  if (fatbin.size() < kContainerHeaderBytes || Read<uint32_t>(fatbin, 0) != kFatbinMagic) {
    return absl::InvalidArgumentError("not a fatbin: no 0xBA55ED50 magic at offset 0");
  }
  if (const uint16_t version = Read<uint16_t>(fatbin, 4); version != kFatbinVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("fatbin version ", version, " at offset 4; only version 1 is known"));
  }
  const uint16_t header_bytes = Read<uint16_t>(fatbin, 6);
  const uint64_t images_bytes = Read<uint64_t>(fatbin, 8);
  if (header_bytes < kContainerHeaderBytes || header_bytes > fatbin.size() ||
      images_bytes > fatbin.size() - header_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("fatbin header (", header_bytes, " bytes) announces ", images_bytes,
                     " bytes of images; the fatbin is ", fatbin.size(), " bytes"));
  }
  const size_t end = header_bytes + images_bytes;
  std::vector<FatbinImage> images;
  size_t offset = header_bytes;
  while (offset < end) {
    if (end - offset < kImageHeaderMinBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("fatbin image header at offset ", offset, " runs past the end"));
    }
    const uint16_t kind = Read<uint16_t>(fatbin, offset);
    const uint32_t image_header_bytes = Read<uint32_t>(fatbin, offset + 4);
    const uint64_t payload_bytes = Read<uint64_t>(fatbin, offset + 8);
    if (image_header_bytes < kImageHeaderMinBytes || image_header_bytes > end - offset ||
        payload_bytes > end - offset - image_header_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("fatbin image at offset ", offset, " (header ", image_header_bytes,
                       " bytes, payload ", payload_bytes, " bytes) runs past the end at ", end));
    }
    if (kind != kKindPtx && kind != kKindElf) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fatbin image at offset ", offset, " has kind ", kind, "; expected 1 (PTX) or 2 (ELF)"));
    }
    FatbinImage image;
    image.kind = kind == kKindPtx ? FatbinImage::Kind::kPtx : FatbinImage::Kind::kElf;
    image.arch = static_cast<int>(Read<uint32_t>(fatbin, offset + 28));
    image.compressed = (Read<uint64_t>(fatbin, offset + 40) & kCompressedFlags) != 0;
    image.payload_bytes = static_cast<int64_t>(payload_bytes);
    images.push_back(image);
    offset += image_header_bytes + payload_bytes;
  }
  return images;
}

FatbinFit FatbinRunsOn(absl::Span<const FatbinImage> images, int sm_major, int sm_minor) {
  const int gpu = sm_major * 10 + sm_minor;
  bool ptx = false;
  for (const FatbinImage& image : images) {
    if (image.kind == FatbinImage::Kind::kElf && image.arch / 10 == sm_major &&
        image.arch % 10 <= sm_minor) {
      return FatbinFit::kSass;
    }
    if (image.kind == FatbinImage::Kind::kPtx && image.arch <= gpu) ptx = true;
  }
  return ptx ? FatbinFit::kPtx : FatbinFit::kNone;
}

}  // namespace gpukit
