// The server's HTTP request reading, from memory (parse_http_requests: the
// transport's parser and limits without the sockets): keep-alive requests in
// a row, chunked bodies counted against the body limit, a Content-Length past
// it refused before the body, malformed lengths, oversized headers and
// requests cut short.
#include <gtest/gtest.h>

#include <string>

#include "serve/http_transport.h"

namespace parspec {
namespace {

HttpTransportOptions small_limits() {
  HttpTransportOptions o;
  o.max_body_bytes = 1000;
  o.max_header_bytes = 2000;
  return o;
}

std::string chunked(const std::string& body, size_t chunk) {
  std::string out;
  for (size_t at = 0; at < body.size(); at += chunk) {
    const std::string piece = body.substr(at, chunk);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    out += size + piece + "\r\n";
  }
  return out + "0\r\n\r\n";
}

TEST(HttpParse, KeepAliveRequestsInARow) {
  const std::string bytes =
      "GET /health?probe=1 HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nauthorization: Bearer k\r\n"
      "Content-Length: 11\r\n\r\n{\"a\": true}"
      "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
      "GET /not-read HTTP/1.1\r\nHost: x\r\n\r\n";
  const HttpParsed p = parse_http_requests(bytes, small_limits());
  EXPECT_EQ(p.error_status, 0);
  ASSERT_EQ(p.requests.size(), 3u);  // the server closes after the Connection: close one
  EXPECT_EQ(p.requests[0].method, "GET");
  EXPECT_EQ(p.requests[0].path, "/health");
  EXPECT_EQ(p.requests[1].method, "POST");
  EXPECT_EQ(p.requests[1].path, "/v1/completions");
  EXPECT_EQ(p.requests[1].body, "{\"a\": true}");
  EXPECT_EQ(p.requests[1].header("Authorization"), "Bearer k");
  EXPECT_EQ(p.requests[1].header("X-Absent"), "");
  EXPECT_EQ(p.requests[2].path, "/metrics");
}

TEST(HttpParse, ChunkedBodiesCountAgainstTheLimit) {
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string fits(1000, 'a');
  HttpParsed p = parse_http_requests(head + chunked(fits, 7), small_limits());
  EXPECT_EQ(p.error_status, 0);
  ASSERT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.requests[0].body, fits);
  // One byte more, in small chunks or in one: 413.
  for (const size_t chunk : {size_t{7}, size_t{1001}}) {
    p = parse_http_requests(head + chunked(fits + "b", chunk), small_limits());
    EXPECT_EQ(p.error_status, 413) << chunk;
    EXPECT_TRUE(p.requests.empty()) << chunk;
  }
}

TEST(HttpParse, ContentLengthPastTheLimitIsRefusedBeforeTheBody) {
  // Only the header has arrived: the answer needs none of the body.
  const HttpParsed p = parse_http_requests(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n", small_limits());
  EXPECT_EQ(p.error_status, 413);
}

TEST(HttpParse, MalformedLengthsAreBadRequests) {
  for (const char* length : {"-1", "abc", "1, 2", "99999999999999999999999"}) {
    const HttpParsed p = parse_http_requests(
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ") + length +
            "\r\n\r\n{}",
        small_limits());
    EXPECT_EQ(p.error_status, 400) << length;
    EXPECT_TRUE(p.requests.empty()) << length;
  }
  const HttpParsed bad_chunk = parse_http_requests(
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
      small_limits());
  EXPECT_EQ(bad_chunk.error_status, 400);
  const HttpParsed not_http = parse_http_requests("\x16\x03\x01 not http\r\n\r\n", small_limits());
  EXPECT_EQ(not_http.error_status, 400);
}

TEST(HttpParse, OversizedHeadersGet431) {
  const HttpParsed p = parse_http_requests(
      "GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + std::string(3000, 'a') + "\r\n\r\n",
      small_limits());
  EXPECT_EQ(p.error_status, 431);
}

TEST(HttpParse, RequestsCutShortAreNotAnswered) {
  for (const std::string& bytes :
       {std::string("GET /health HTTP/1.1\r\nHost: x\r\n"),
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{}"),
        // Chunked bodies cut within a chunk, and after the last chunk's size line (before the
        // CRLF that ends the trailers).
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "5\r\n{\"a"),
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "2\r\n{}\r\n0\r\n")}) {
    const HttpParsed p = parse_http_requests(bytes, small_limits());
    EXPECT_EQ(p.error_status, 0) << bytes;
    EXPECT_TRUE(p.requests.empty()) << bytes;
  }
}

}  // namespace
}  // namespace parspec
