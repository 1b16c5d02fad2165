// `parspec serve`'s HTTP limits against hostile clients, over loopback: a
// chunked body past --max-body is a 413 (a declared one before the client
// sends it, Expect: 100-continue); `Content-Length: -1` is a 400 at
// once; connections that send their header slowly are closed at
// --request-timeout while /health answers (they hold no thread: the server
// runs with two handler threads); idle keep-alive connections close at
// --idle-timeout; connections past --max-connections-per-client and
// --max-connections get a clean 429 / 503. Clients connect from different
// loopback addresses (127.0.0.2, ...), which the server sees as different
// clients.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve_helpers.h"
#include "test_helpers.h"

namespace parspec {
namespace {

using nlohmann::json;
using testing_support::http_request;
using testing_support::HttpReply;
using testing_support::ServerProcess;
using testing_support::TempDir;
using Clock = std::chrono::steady_clock;

const std::string kModels = std::string(PARSPEC_SOURCE_DIR) + "/models/";
constexpr double kRequestTimeout = 2.0;
constexpr double kIdleTimeout = 1.0;
constexpr int kPerClient = 12;
constexpr int kMaxConnections = 20;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A connection to the server from `source`, a loopback address; -1 if it failed.
int connect_from(const std::string& source, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, source.c_str(), &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_all(int fd, const std::string& data) {
  for (size_t sent = 0; sent < data.size();) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// What arrives on `fd` until the server closes it or `timeout_s` passes;
// `closed` says which.
std::string read_until_closed(int fd, double timeout_s, bool* closed = nullptr) {
  std::string data;
  const Clock::time_point start = Clock::now();
  if (closed) *closed = false;
  char buf[8192];
  while (seconds_since(start) < timeout_s) {
    pollfd p{fd, POLLIN, 50};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

int status_of(const std::string& reply) {
  int status = 0;
  std::sscanf(reply.c_str(), "HTTP/1.1 %d", &status);
  return status;
}

std::string body_of(const std::string& reply) {
  const size_t end = reply.find("\r\n\r\n");
  return end == std::string::npos ? "" : reply.substr(end + 4);
}

// /health from 127.0.0.1 with a bound on the wait (status 0: no answer in 5 s).
int health_status(int port) {
  const int fd = connect_from("127.0.0.1", port);
  if (fd < 0) return 0;
  send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string reply = read_until_closed(fd, 5.0);
  close(fd);
  return status_of(reply);
}

class ServeLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerProcess(PARSPEC_BINARY,
                                {"-m",
                                 kModels + "target.gguf",
                                 "--port",
                                 "0",
                                 "-t",
                                 "1",
                                 "-c",
                                 "256",
                                 "--max-body",
                                 "65536",
                                 "--threads-http",
                                 "2",
                                 "--request-timeout",
                                 std::to_string(kRequestTimeout),
                                 "--idle-timeout",
                                 std::to_string(kIdleTimeout),
                                 "--max-connections",
                                 std::to_string(kMaxConnections),
                                 "--max-connections-per-client",
                                 std::to_string(kPerClient)},
                                dir_->file("server.log"));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override { ASSERT_GT(server_->port(), 0) << server_->log(); }
  static int port() { return server_->port(); }

  static TempDir* dir_;
  static ServerProcess* server_;
};
TempDir* ServeLimitsTest::dir_ = nullptr;
ServerProcess* ServeLimitsTest::server_ = nullptr;

std::string chunked_request(const std::string& body, size_t chunk) {
  std::string raw =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (size_t at = 0; at < body.size(); at += chunk) {
    const std::string piece = body.substr(at, chunk);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
    raw += size + piece + "\r\n";
  }
  return raw + "0\r\n\r\n";
}

TEST_F(ServeLimitsTest, ChunkedBodiesCountAgainstTheBodyLimit) {
  // Within the limit, a chunked body is read as any other.
  const std::string small = R"({"prompt": "def f(x):", "max_tokens": 2, "temperature": 0})";
  const int fd = connect_from("127.0.0.1", port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, chunked_request(small, 7)));
  std::string reply = read_until_closed(fd, 10.0);
  close(fd);
  EXPECT_EQ(status_of(reply), 200) << reply;

  // 1 MiB in 4 KiB chunks, past --max-body 65536: 413 in OpenAI's error shape.
  const std::string big = R"({"prompt": ")" + std::string(1 << 20, 'a') + R"("})";
  const int big_fd = connect_from("127.0.0.1", port());
  ASSERT_GE(big_fd, 0);
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    sent = send_all(big_fd, chunked_request(big, 4096));
    shutdown(big_fd, SHUT_WR);
  });
  reply = read_until_closed(big_fd, 10.0);
  sender.join();
  close(big_fd);
  EXPECT_EQ(status_of(reply), 413) << reply;
  const json error = json::parse(body_of(reply), nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << reply;
  EXPECT_NE(error["error"]["message"].get<std::string>().find("--max-body"), std::string::npos);
  EXPECT_EQ(health_status(port()), 200);
}

TEST_F(ServeLimitsTest, ExpectContinueGetsTheGoAheadOrA413First) {
  // curl sends large bodies this way: the header, then the body once told to.
  const std::string body = R"({"prompt": "def f(x):", "max_tokens": 2, "temperature": 0})";
  const int fd = connect_from("127.0.0.1", port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       "Expect: 100-continue\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n"));
  std::string reply;
  char buf[4096];
  while (reply.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << reply;
    reply.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(reply.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << reply;
  ASSERT_TRUE(send_all(fd, body));
  reply = read_until_closed(fd, 10.0);
  close(fd);
  EXPECT_EQ(status_of(reply), 200) << reply;

  // Past --max-body: the 413 comes instead of the go-ahead.
  const int big = connect_from("127.0.0.1", port());
  ASSERT_GE(big, 0);
  ASSERT_TRUE(send_all(big,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                       "Content-Length: 100000\r\n\r\n"));
  reply = read_until_closed(big, 10.0);
  close(big);
  EXPECT_EQ(status_of(reply), 413) << reply;
}

TEST_F(ServeLimitsTest, NegativeContentLengthIsABadRequestAtOnce) {
  const Clock::time_point start = Clock::now();
  const int fd = connect_from("127.0.0.1", port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
      send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}"));
  bool closed = false;
  const std::string reply = read_until_closed(fd, 10.0, &closed);
  close(fd);
  EXPECT_EQ(status_of(reply), 400) << reply;
  EXPECT_TRUE(closed);
  // Answered without waiting for a body or a deadline.
  EXPECT_LT(seconds_since(start), kRequestTimeout);
}

TEST_F(ServeLimitsTest, SlowHeadersAreClosedAtTheDeadlineWhileHealthAnswers) {
  // More slow connections than handler threads (2): with a thread per
  // connection they would stop the server.
  constexpr int kSlow = 10;
  std::vector<int> slow;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < kSlow; ++i) {
    const int fd = connect_from("127.0.0.2", port());
    ASSERT_GE(fd, 0);
    slow.push_back(fd);
  }
  // One header byte per connection every 0.2 s, a header that never ends.
  // Written by the drip thread, read by this one while it probes.
  std::vector<std::atomic<double>> closed_at(kSlow);
  for (auto& t : closed_at) t = -1;
  std::atomic<bool> done{false};
  std::thread drip([&] {
    const std::string header =
        "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'a');
    for (size_t i = 0; !done; i = (i + 1) % header.size()) {
      for (int c = 0; c < kSlow; ++c) {
        if (closed_at[c] >= 0) continue;
        pollfd p{slow[c], POLLIN, 0};
        char byte;
        if ((poll(&p, 1, 0) > 0 && recv(slow[c], &byte, 1, MSG_DONTWAIT) == 0) ||
            send(slow[c], &header[i], 1, MSG_NOSIGNAL) != 1)
          closed_at[c] = seconds_since(start);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // /health answers throughout, until every slow connection is closed.
  const auto all_closed = [&] {
    return std::all_of(closed_at.begin(), closed_at.end(),
                       [](const std::atomic<double>& t) { return t >= 0; });
  };
  int probes = 0;
  while (!all_closed() && seconds_since(start) < kRequestTimeout + 8.0) {
    EXPECT_EQ(health_status(port()), 200) << "at " << seconds_since(start) << " s";
    ++probes;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  done = true;
  drip.join();
  EXPECT_GE(probes, 10);
  for (int c = 0; c < kSlow; ++c) {
    EXPECT_GE(closed_at[c].load(), kRequestTimeout - 0.1) << "connection " << c;
    EXPECT_LT(closed_at[c].load(), kRequestTimeout + 8.0) << "connection " << c;
    close(slow[c]);
  }
  const HttpReply metrics = http_request(port(), "GET", "/metrics");
  EXPECT_NE(metrics.body.find("parspec_http_timed_out_connections_total"), std::string::npos);
}

TEST_F(ServeLimitsTest, IdleKeepAliveConnectionsCloseAtTheIdleTimeout) {
  const int fd = connect_from("127.0.0.1", port());
  ASSERT_GE(fd, 0);
  // Two requests on the connection, then silence.
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string reply;
    char buf[4096];
    while (reply.find("{\"status\":\"ok\"}") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      ASSERT_GT(n, 0) << "request " << i << ": " << reply;
      reply.append(buf, static_cast<size_t>(n));
    }
    EXPECT_EQ(status_of(reply), 200) << reply;
    EXPECT_NE(reply.find("Keep-Alive: timeout="), std::string::npos) << reply;
  }
  const Clock::time_point idle_since = Clock::now();
  bool closed = false;
  read_until_closed(fd, kIdleTimeout + 5.0, &closed);
  close(fd);
  EXPECT_TRUE(closed);
  EXPECT_GE(seconds_since(idle_since), kIdleTimeout - 0.1);
}

TEST_F(ServeLimitsTest, ConnectionsPastTheCapsAreRefusedCleanly) {
  std::vector<int> open;
  for (int i = 0; i < kPerClient; ++i) {
    const int fd = connect_from("127.0.0.3", port());
    ASSERT_GE(fd, 0);
    open.push_back(fd);
  }
  // One more from the same address: 429, then the server closes it.
  const int extra = connect_from("127.0.0.3", port());
  ASSERT_GE(extra, 0);
  send_all(extra, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  bool closed = false;
  std::string reply = read_until_closed(extra, 5.0, &closed);
  close(extra);
  EXPECT_EQ(status_of(reply), 429) << reply;
  EXPECT_TRUE(closed);
  EXPECT_NE(body_of(reply).find("--max-connections-per-client"), std::string::npos) << reply;

  // Other addresses up to the server's cap; past it, 503.
  for (int i = kPerClient; i < kMaxConnections; ++i) {
    const int fd = connect_from("127.0.0.4", port());
    ASSERT_GE(fd, 0);
    open.push_back(fd);
  }
  const int past = connect_from("127.0.0.5", port());
  ASSERT_GE(past, 0);
  reply = read_until_closed(past, 5.0, &closed);
  close(past);
  EXPECT_EQ(status_of(reply), 503) << reply;
  EXPECT_TRUE(closed);
  const json error = json::parse(body_of(reply), nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << reply;
  EXPECT_EQ(error["error"]["type"], "server_error");

  // Connections that close free their places.
  for (const int fd : open) close(fd);
  int status = 0;
  for (int i = 0; i < 50 && status != 200; ++i) {
    status = health_status(port());
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(status, 200);
}

}  // namespace
}  // namespace parspec
