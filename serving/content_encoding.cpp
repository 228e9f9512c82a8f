#include "serving/content_encoding.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

namespace flow::serving {
namespace {

std::string lower_trimmed(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  std::string out = text.substr(first, text.find_last_not_of(" \t") - first + 1);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Inflates a gzip or zlib stream (zlib tells them apart by their headers) in steps, so that the
// limit is checked before more than one step past it is allocated.
std::string inflate(const std::string& encoded, size_t max_bytes) {
  constexpr size_t kStep = 64 << 10;
  z_stream stream{};
  // 15: the largest window; +32: detect a gzip or a zlib header.
  if (inflateInit2(&stream, 15 + 32) != Z_OK) throw HttpError(500, "[serving] cannot start zlib");
  struct End {
    z_stream& stream;
    ~End() { inflateEnd(&stream); }
  } end{stream};
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(encoded.data()));
  stream.avail_in = static_cast<uInt>(std::min<size_t>(encoded.size(), UINT32_MAX));
  size_t unread = encoded.size() - stream.avail_in;
  std::string out;
  for (;;) {
    const size_t used = out.size();
    if (used > max_bytes) {
      throw HttpError(413, "[serving] the request body inflates to more than the limit of " + std::to_string(max_bytes) + " bytes");
    }
    out.resize(used + kStep);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    stream.avail_out = static_cast<uInt>(kStep);
    const int status = ::inflate(&stream, Z_NO_FLUSH);
    out.resize(used + kStep - stream.avail_out);
    if (status == Z_STREAM_END) {
      if (stream.avail_in != 0 || unread != 0) throw HttpError(400, "[serving] bytes after the end of the compressed body");
      if (out.size() > max_bytes) {
        throw HttpError(413, "[serving] the request body inflates to more than the limit of " + std::to_string(max_bytes) + " bytes");
      }
      return out;
    }
    if (status == Z_BUF_ERROR && stream.avail_in == 0 && unread == 0) throw HttpError(400, "[serving] the compressed body is truncated");
    if (status != Z_OK && status != Z_BUF_ERROR) {
      throw HttpError(400, std::string("[serving] the compressed body does not inflate: ") + (stream.msg ? stream.msg : "corrupt"));
    }
    if (stream.avail_in == 0 && unread > 0) {
      const size_t next = std::min<size_t>(unread, UINT32_MAX);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(encoded.data() + encoded.size() - unread));
      stream.avail_in = static_cast<uInt>(next);
      unread -= next;
    }
  }
}

}  // namespace

std::string decode_content(std::string body, const std::optional<std::string>& encoding, size_t max_bytes) {
  const std::string name = encoding ? lower_trimmed(*encoding) : "";
  if (name.empty() || name == "identity") return body;
  if (name == "gzip" || name == "x-gzip" || name == "deflate") return inflate(body, max_bytes);
  throw HttpError(415, "[serving] unsupported Content-Encoding '" + *encoding + "' (gzip, deflate or identity)");
}

}  // namespace flow::serving
